package ostree

import (
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// synthetic builds an import result by hand (no ostree CLI needed).
func synthetic(t *testing.T, files map[string]string) *ImportResult {
	t.Helper()
	root := fstree.New()
	for p, content := range files {
		dir := p[:strings.LastIndex(p, "/")]
		if _, err := root.MkdirAll(dir, 0o755, 0, 0); err != nil {
			t.Fatal(err)
		}
		ino := &fstree.Inode{Kind: fstree.KindRegular, Mode: 0o644}
		if strings.HasPrefix(content, "->") {
			ino = &fstree.Inode{Kind: fstree.KindSymlink, Mode: 0o777, Target: content[2:]}
		} else if content != "" {
			ino.Content = fstree.BytesContent(content)
		}
		if err := root.Add(p, ino); err != nil {
			t.Fatal(err)
		}
	}
	return &ImportResult{Commit: strings.Repeat("ab", 32), Root: root, Repo: fstree.New(),
		ImageRef: ContainerImageRef("quay.io/x/y:1"), Labels: map[string]string{}}
}

func TestDeployRules(t *testing.T) {
	base := map[string]string{
		"usr/etc/passwd":                      "root\n",
		"usr/lib/os-release":                  "ID=plain\n",
		"usr/lib/modules/6.9.0/vmlinuz":       "kernel",
		"usr/lib/modules/6.9.0/modules.dep":   "",
		"usr/lib/modules/extra-only/foo.ko":   "module",
		"usr/lib/modules/6.9.0/.vmlinuz.hmac": "hmac",
	}
	imp := synthetic(t, base)
	tree, info, err := Deploy(imp, DeployOptions{OSName: "scos"})
	if err != nil {
		t.Fatal(err)
	}
	if info.KernelVersion != "6.9.0" || info.Initramfs != "" || info.Hmac == "" {
		t.Errorf("kernel %+v", info)
	}
	// No initramfs: ostree boots ostree-prepare-root as init.
	if !strings.HasSuffix(info.Options, "/usr/lib/ostree/ostree-prepare-root") || !strings.HasPrefix(info.Options, "ostree=/ostree/boot.1/scos/") {
		t.Errorf("options %q", info.Options)
	}
	bls, _ := tree.Lookup(info.BLSEntry)
	rc, _ := bls.Content.Open()
	buf := make([]byte, 1024)
	n, _ := rc.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "title plain (ostree:0)\n") || strings.Contains(string(buf[:n]), "initrd") {
		t.Errorf("BLS entry without PRETTY_NAME or initramfs:\n%s", buf[:n])
	}
	if _, err := tree.Lookup(info.DeployPath + "/etc/passwd"); err != nil {
		t.Errorf("etc not copied: %v", err)
	}
	// The import result is not modified.
	if _, err := imp.Root.Lookup("etc"); err == nil {
		t.Error("Deploy added etc to the import result's tree")
	}

	for name, c := range map[string]struct {
		files map[string]string
		opts  DeployOptions
		want  string
	}{
		"no kernel":       {map[string]string{"usr/etc/a": "", "usr/lib/os-release": "ID=x\n"}, DeployOptions{OSName: "x"}, "no kernel found"},
		"etc and usr/etc": {map[string]string{"etc/a": "1", "usr/etc/a": "", "usr/lib/modules/1/vmlinuz": "k", "usr/lib/os-release": "ID=x\n"}, DeployOptions{OSName: "x"}, "both /etc and /usr/etc"},
		"no os-release":   {map[string]string{"usr/etc/a": "", "usr/lib/modules/1/vmlinuz": "k"}, DeployOptions{OSName: "x"}, "os-release"},
		"no osname":       {base, DeployOptions{}, "no OS name"},
		"bad osname":      {base, DeployOptions{OSName: "a/b"}, "invalid OS name"},
	} {
		if _, _, err := Deploy(synthetic(t, c.files), c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}

	// Only /etc in the commit: it becomes usr/etc and is copied to /etc;
	// vmlinuz reached through a symlink counts (stat follows links); the
	// stateroot comes from com.coreos.osname when none is given.
	imp = synthetic(t, map[string]string{"etc/hostname": "h\n", "usr/lib/os-release": "PRETTY_NAME='Quoted OS'\n",
		"usr/lib/modules/5.0/vmlinuz": "->../../../../boot/vmlinuz-5.0", "boot/vmlinuz-5.0": "kernel", "usr/lib/modules/5.0/initramfs.img": "init"})
	imp.Labels[LabelOSName] = "fedora-coreos"
	tree, info, err = Deploy(imp, DeployOptions{Kargs: []string{"rw"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.OSName != "fedora-coreos" || info.Options != "rw ostree=/ostree/boot.1/fedora-coreos/"+info.Bootcsum+"/0" {
		t.Errorf("info %+v", info)
	}
	for _, p := range []string{info.DeployPath + "/usr/etc/hostname", info.DeployPath + "/etc/hostname"} {
		if _, err := tree.Lookup(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if want := sha256Hex([]byte("kernelinit")); info.Bootcsum != want {
		t.Errorf("bootcsum %s, want %s", info.Bootcsum, want)
	}
}

func TestShellUnquote(t *testing.T) {
	for in, want := range map[string]string{`"Fedora CoreOS 42"`: "Fedora CoreOS 42", `'a b'`: "a b", `plain`: "plain",
		`"say \"hi\""`: `say "hi"`, `a\ b`: "a b"} {
		if got := shellUnquote(in); got != want {
			t.Errorf("shellUnquote(%s) = %q, want %q", in, got, want)
		}
	}
}
