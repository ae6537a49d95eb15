package bootconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/bootconfig/bootconfigtest"
	"github.com/okd-project/scos-builder/internal/testutil"
)

// TestRenderTemplatesMatchesFCOS rebuilds coreos/kargs.json of a real
// coreos-assembler ISO (FCOS 38) from its templates and compares bytes.
func TestRenderTemplatesMatchesFCOS(t *testing.T) {
	dir := testutil.SharedFixtures(t, "live-iso/fcos-38-x86_64")
	const volid = "fedora-coreos-38.20230718.dev.0"
	kargs, err := LiveKargs([]string{"mitigations=auto,nosmt"}, volid, nil)
	if err != nil {
		t.Fatal(err)
	}
	var templates, want []templateFile
	for _, p := range []string{"EFI/fedora/grub.cfg", "isolinux/isolinux.cfg", "zipl.prm"} {
		data, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(kargs)) {
			t.Fatalf("%s does not contain %q", p, kargs)
		}
		want = append(want, templateFile{path: p, data: data})
		templates = append(templates, templateFile{path: p, data: bytes.Replace(data, []byte(kargs), []byte(KernelArgsPlaceholder), 1)})
	}
	got, kj, err := renderTemplates(templates, kargs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i].data) {
			t.Errorf("rendered %s differs from the fixture", want[i].path)
		}
	}
	// zipl.prm has kargs but no embed area and is dropped by the build.
	if len(kj.Files) != 2 {
		t.Fatalf("areas = %+v, want grub.cfg and isolinux.cfg", kj.Files)
	}
	sortKargsFiles(kj.Files)
	gotJSON, err := kj.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := os.ReadFile(filepath.Join(dir, "coreos/kargs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("kargs.json:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}
}

func TestRenderTemplatesRejectsDisagreeingAreas(t *testing.T) {
	area := func(n int) string { return strings.Repeat("#", n) + embedAreaMarker }
	tests := []struct {
		name  string
		files []templateFile
		err   string
	}{
		{"lengths", []templateFile{
			{path: "a", data: []byte("linux @@KERNEL-ARGS@@\n" + area(100))},
			{path: "b", data: []byte("append @@KERNEL-ARGS@@\n" + area(200))},
		}, "area of"},
		{"cmdline", []templateFile{
			{path: "a", data: []byte("linux @@KERNEL-ARGS@@ x=1\n" + area(100))},
			{path: "b", data: []byte("append @@KERNEL-ARGS@@\n" + area(100))},
		}, "default command line"},
		{"marker first", []templateFile{
			{path: "a", data: []byte(area(10) + "linux @@KERNEL-ARGS@@\n" + "x")},
		}, "before the kernel arguments end"},
		{"too large", []templateFile{
			{path: "a", data: []byte("linux @@KERNEL-ARGS@@\n" + area(3000))},
		}, "limit"},
	}
	for _, tt := range tests {
		_, _, err := renderTemplates(tt.files, "coreos.liveiso=scos-1")
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: error = %v, want %q", tt.name, err, tt.err)
		}
	}
}

func TestBuiltinTemplatesHaveMatchingAreas(t *testing.T) {
	for _, recipe := range BuiltinTemplateRecipes() {
		files, err := builtinTemplates(recipe)
		if err != nil {
			t.Fatal(err)
		}
		_, kj, err := renderTemplates(files, "coreos.liveiso=scos-1")
		if err != nil {
			t.Fatalf("%s: %v", recipe, err)
		}
		if len(kj.Files) != 2 || kj.Size != len(kj.Default)+1+1023 {
			t.Errorf("%s: kargs = %+v", recipe, kj)
		}
	}
	if _, err := builtinTemplates("debian"); err == nil || !strings.Contains(err.Error(), "valid: fcos, okd, rhcos, scos") {
		t.Errorf("unknown recipe error = %v", err)
	}
}

type builtTree struct {
	root, tree string
	res        *Result
}

func buildTree(t *testing.T, src bootconfigtest.Options, mod func(*Options)) (builtTree, error) {
	t.Helper()
	testutil.RequireTool(t, "mformat", "mcopy", "mmd")
	if src.Arch == "" {
		src.Arch = "x86_64"
	}
	root := bootconfigtest.SourceTree(t, src)
	in := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(in, f), []byte("test "+f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A minimal rootfs: the squashfs magic where the initramfs expects it.
	rootfs := make([]byte, 4096)
	copy(rootfs[124:], "hsqs")
	if err := os.WriteFile(filepath.Join(in, "rootfs.img"), rootfs, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		SourceRoot:      root,
		TreeDir:         filepath.Join(t.TempDir(), "tree"),
		Arch:            src.Arch,
		Kernel:          filepath.Join(in, "vmlinuz"),
		Initramfs:       filepath.Join(in, "initrd.img"),
		Rootfs:          filepath.Join(in, "rootfs.img"),
		OSName:          "scos",
		Version:         "9.0.20260101-0",
		SourceDateEpoch: 1700000000,
	}
	if mod != nil {
		mod(&opts)
	}
	res, err := Build(context.Background(), opts)
	return builtTree{root: root, tree: opts.TreeDir, res: res}, err
}

func readTree(t *testing.T, tree, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tree, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestBuildX86(t *testing.T) {
	b, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib, ExtraKargs: []string{"mitigations=auto,nosmt", "console=ttyS0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tree := b.tree
	wantDefault := "mitigations=auto,nosmt coreos.liveiso=scos-9.0.20260101-0 ignition.firstboot ignition.platform.id=metal"
	if b.res.VolumeID != "scos-9.0.20260101-0" || b.res.Vendor != "debian" || b.res.Kargs.Default != wantDefault {
		t.Errorf("result = %+v", b.res)
	}
	if len(b.res.Warnings) != 0 {
		t.Errorf("warnings: %q", b.res.Warnings)
	}

	// Files the consumers look up, and nothing that must not be there.
	for _, p := range []string{"EFI/debian/grub.cfg", "isolinux/isolinux.cfg", "isolinux/boot.msg",
		"isolinux/isolinux.bin", "isolinux/ldlinux.c32", "isolinux/libcom32.c32", "isolinux/libutil.c32", "isolinux/vesamenu.c32",
		"images/efiboot.img", "images/ignition.img", "images/pxeboot/vmlinuz", "images/pxeboot/initrd.img", "images/pxeboot/rootfs.img",
		"coreos/igninfo.json", "coreos/kargs.json", "coreos/features.json", "coreos/miniso.dat"} {
		if _, err := os.Stat(filepath.Join(tree, p)); err != nil {
			t.Errorf("missing %s", p)
		}
	}
	for _, p := range []string{"zipl.prm", "README-devel.md", "EFI/vendor"} {
		if _, err := os.Stat(filepath.Join(tree, p)); err == nil {
			t.Errorf("%s must not be in the tree", p)
		}
	}
	if fi, _ := os.Stat(filepath.Join(tree, "isolinux/isolinux.bin")); fi.Mode().Perm() != 0o755 {
		t.Errorf("isolinux.bin mode %v", fi.Mode())
	}

	if got := readTree(t, tree, "images/ignition.img"); len(got) != 262144 || !bytes.Equal(got, make([]byte, 262144)) {
		t.Errorf("ignition.img: %d bytes, not all zero", len(got))
	}
	if got := readTree(t, tree, "coreos/miniso.dat"); len(got) != 16384 || !bytes.Equal(got, make([]byte, 16384)) {
		t.Errorf("miniso.dat: %d bytes, not all zero", len(got))
	}
	if got := string(readTree(t, tree, "coreos/igninfo.json")); got != "{\n  \"file\": \"images/ignition.img\"\n}\n" {
		t.Errorf("igninfo.json = %q", got)
	}
	var features Features
	if err := json.Unmarshal(readTree(t, tree, "coreos/features.json"), &features); err != nil {
		t.Fatal(err)
	}
	if !features.InstallerConfig || !features.LiveInitrdNetwork || len(features.InstallerConfigDirectives) != 5 || !features.InstallerConfigDirectives["dest-device"] {
		t.Errorf("features = %+v", features)
	}

	// kargs.json as coreos-installer reads it, and every area as written.
	var kj KargsJSON
	raw := readTree(t, tree, "coreos/kargs.json")
	if err := json.Unmarshal(raw, &kj); err != nil {
		t.Fatal(err)
	}
	if kj.Default != wantDefault || kj.Size != len(wantDefault)+1+1023 || len(kj.Files) != 2 ||
		kj.Files[0].Path != "EFI/debian/grub.cfg" || kj.Files[1].Path != "isolinux/isolinux.cfg" {
		t.Fatalf("kargs.json = %s", raw)
	}
	for _, f := range kj.Files {
		data := readTree(t, tree, f.Path)
		area := string(data[f.Offset : f.Offset+kj.Size])
		want := kj.Default + "\n" + strings.Repeat("#", kj.Size-len(kj.Default)-1)
		if area != want {
			t.Errorf("%s: area at %d = %.80q...", f.Path, f.Offset, area)
		}
		if after := string(data[f.Offset+kj.Size:]); !strings.HasPrefix(after, embedAreaMarker) {
			t.Errorf("%s: area not followed by the marker: %.40q", f.Path, after)
		}
		if f.Pad != "#" || f.End != "\n" {
			t.Errorf("%s: pad %q end %q", f.Path, f.Pad, f.End)
		}
	}

	// The ESP as firmware sees it.
	esp := filepath.Join(tree, "images/efiboot.img")
	if fi, _ := os.Stat(esp); fi.Size()%512 != 0 {
		t.Errorf("efiboot.img size %d is not a multiple of 512", fi.Size())
	}
	out, err := exec.Command("minfo", "-i", esp, "::").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "EFI-SYSTEM") {
		t.Errorf("minfo: %v: %s", err, out)
	}
	out, err = exec.Command("mdir", "-b", "-i", esp, "::/EFI/BOOT").CombinedOutput()
	if err != nil {
		t.Fatalf("mdir: %v: %s", err, out)
	}
	var names []string
	for _, l := range strings.Fields(string(out)) {
		names = append(names, filepath.Base(l))
	}
	if got := strings.Join(names, " "); got != "BOOTX64.EFI grub.cfg grubx64.efi mmx64.efi" {
		t.Errorf("EFI/BOOT holds %q", got)
	}
	for name, want := range map[string]string{"BOOTX64.EFI": bootconfigtest.HostShim, "grubx64.efi": bootconfigtest.HostGrub} {
		got, err := exec.Command("mtype", "-i", esp, "::/EFI/BOOT/"+name).Output()
		wantData, _ := os.ReadFile(want)
		if err != nil || !bytes.Equal(got, wantData) {
			t.Errorf("EFI/BOOT/%s differs from %s (%v)", name, want, err)
		}
	}
	stub, err := exec.Command("mtype", "-i", esp, "::/EFI/BOOT/grub.cfg").Output()
	if err != nil || string(stub) != StubGrubCfg("scos-9.0.20260101-0", "debian") {
		t.Errorf("stub grub.cfg = %q (%v)", stub, err)
	}
	if !strings.Contains(string(stub), `search --label "scos-9.0.20260101-0" --set root --no-floppy`) {
		t.Errorf("stub grub.cfg lacks the label search: %q", stub)
	}
	if _, err := exec.LookPath("fsck.vfat"); err == nil {
		if out, err := exec.Command("fsck.vfat", "-n", esp).CombinedOutput(); err != nil {
			t.Errorf("fsck.vfat: %v: %s", err, out)
		}
	}
}

// TestStubGrubCfgMatchesCosa compares the ESP stub with coreos-assembler's.
func TestStubGrubCfgMatchesCosa(t *testing.T) {
	p := testutil.SharedFixtures(t, "live-iso/efiboot-stub-grub.cfg.example")
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := StubGrubCfg("fedora-coreos-38.20230718.dev.0", "fedora"); got != string(want) {
		t.Errorf("stub:\n%s\nwant:\n%s", got, want)
	}
}

func TestBuildEFILayouts(t *testing.T) {
	for _, layout := range []bootconfigtest.EFILayout{bootconfigtest.EFIBootupd, bootconfigtest.EFIDebianESP} {
		t.Run(string(layout), func(t *testing.T) {
			b, err := buildTree(t, bootconfigtest.Options{EFI: layout}, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("mdir", "-b", "-i", filepath.Join(b.tree, "images/efiboot.img"), "::/EFI/BOOT").CombinedOutput()
			if err != nil {
				t.Fatal(err)
			}
			got := string(out)
			for _, want := range []string{"BOOTX64.EFI", "grubx64.efi", "mmx64.efi", "grub.cfg"} {
				if !strings.Contains(got, want) {
					t.Errorf("EFI/BOOT lacks %s: %s", want, got)
				}
			}
			for _, bad := range []string{"fbx64", "shimx64", "CSV"} {
				if strings.Contains(got, bad) {
					t.Errorf("EFI/BOOT has %s: %s", bad, got)
				}
			}
			shim, _ := os.ReadFile(bootconfigtest.HostShim)
			boot, err := exec.Command("mtype", "-i", filepath.Join(b.tree, "images/efiboot.img"), "::/EFI/BOOT/BOOTX64.EFI").Output()
			if err != nil || !bytes.Equal(boot, shim) {
				t.Errorf("BOOTX64.EFI is not shim (%v)", err)
			}
		})
	}
}

func TestBuildBuiltinTemplates(t *testing.T) {
	b, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib, NoTemplates: true}, func(o *Options) { o.Recipe = "scos" })
	if err != nil {
		t.Fatal(err)
	}
	if b.res.TemplateSource != "builtin:scos" {
		t.Errorf("template source %q", b.res.TemplateSource)
	}
	grub := string(readTree(t, b.tree, "EFI/debian/grub.cfg"))
	if !strings.Contains(grub, "menuentry 'CentOS Stream CoreOS (Live)'") || !strings.Contains(grub, "coreos.liveiso=scos-9.0.20260101-0 ignition.firstboot") {
		t.Errorf("built-in grub.cfg:\n%s", grub)
	}
	if len(b.res.Kargs.Files) != 2 {
		t.Errorf("kargs = %+v", b.res.Kargs)
	}

	_, err = buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib, NoTemplates: true}, nil)
	if err == nil || !strings.Contains(err.Error(), "no usr/share/coreos-assembler/live") {
		t.Errorf("no templates, no recipe: error = %v", err)
	}
}

func TestBuildWithoutEFI(t *testing.T) {
	_, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFINone}, nil)
	if !errors.Is(err, ErrNoEFI) {
		t.Fatalf("error = %v, want ErrNoEFI", err)
	}
	b, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFINone}, func(o *Options) { o.AllowNoEFI = true })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"EFI", "images/efiboot.img"} {
		if _, err := os.Stat(filepath.Join(b.tree, p)); err == nil {
			t.Errorf("BIOS-only tree has %s", p)
		}
	}
	if len(b.res.Kargs.Files) != 1 || b.res.Kargs.Files[0].Path != "isolinux/isolinux.cfg" || len(b.res.Warnings) != 1 {
		t.Errorf("result = %+v", b.res)
	}
}

func TestBuildAarch64(t *testing.T) {
	b, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib, Arch: "aarch64"}, func(o *Options) { o.SyslinuxDir = t.TempDir() })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.tree, "isolinux")); err == nil {
		t.Error("aarch64 tree has isolinux/")
	}
	if len(b.res.Kargs.Files) != 1 || b.res.Kargs.Files[0].Path != "EFI/debian/grub.cfg" || b.res.Syslinux != nil {
		t.Errorf("result = %+v", b.res)
	}
	out, err := exec.Command("mdir", "-b", "-i", filepath.Join(b.tree, "images/efiboot.img"), "::/EFI/BOOT").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "BOOTAA64.EFI") || !strings.Contains(string(out), "grubaa64.efi") {
		t.Errorf("aarch64 EFI/BOOT: %v: %s", err, out)
	}
}

func TestBuildBadInput(t *testing.T) {
	noTools := func(name string) (string, error) { return "", exec.ErrNotFound }
	tests := []struct {
		name string
		mod  func(*Options)
		want string
		is   error
	}{
		{"no mtools", func(o *Options) { o.LookPath = noTools }, `install the Debian package "mtools"`, nil},
		{"no syslinux", func(o *Options) { o.SyslinuxDir = t.TempDir() }, `install the Debian packages "isolinux" and "syslinux-common"`, nil},
		{"ppc64le", func(o *Options) { o.Arch = "ppc64le" }, "not supported yet", ErrArchNotSupported},
		{"s390x", func(o *Options) { o.Arch = "s390x" }, "not supported yet", ErrArchNotSupported},
		{"unknown arch", func(o *Options) { o.Arch = "riscv64" }, "valid: x86_64, aarch64, ppc64le, s390x", nil},
		{"bad rootfs", func(o *Options) { o.Rootfs = o.Kernel }, "no squashfs (hsqs) at byte 124", nil},
		{"no version", func(o *Options) { o.Version = "" }, "must both be set", nil},
		{"bad karg", func(o *Options) { o.AddKargs = []string{"a#b"} }, "contains a newline or '#'", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib}, tt.mod)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	a, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"images/efiboot.img", "coreos/kargs.json", "EFI/debian/grub.cfg", "isolinux/isolinux.cfg", "coreos/features.json"} {
		if !bytes.Equal(readTree(t, a.tree, p), readTree(t, b.tree, p)) {
			t.Errorf("%s differs between two builds", p)
		}
	}
}

// TestBuildWithFCOSTemplates builds from FCOS 38's real templates
// (recovered from the fixture ISO): EFI/fedora moves to the vendor of the
// image's EFI binaries and the areas keep FCOS's offsets.
func TestBuildWithFCOSTemplates(t *testing.T) {
	dir := testutil.SharedFixtures(t, "live-iso/fcos-38-x86_64")
	const fcosKargs = "mitigations=auto,nosmt coreos.liveiso=fedora-coreos-38.20230718.dev.0"
	b, err := buildTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib, NoTemplates: true, ExtraKargs: []string{"mitigations=auto,nosmt"}}, func(o *Options) {
		for _, p := range []string{"EFI/fedora/grub.cfg", "isolinux/isolinux.cfg", "zipl.prm"} {
			data, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			data = bytes.Replace(data, []byte(fcosKargs), []byte(KernelArgsPlaceholder), 1)
			if err := writeFile(filepath.Join(o.SourceRoot, LiveTemplateDir), p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	kj := b.res.Kargs
	want := []KargsFile{{End: "\n", Offset: 970, Pad: "#", Path: "EFI/debian/grub.cfg"}, {End: "\n", Offset: 1869, Pad: "#", Path: "isolinux/isolinux.cfg"}}
	if len(kj.Files) != 2 || kj.Files[0] != want[0] || kj.Files[1] != want[1] {
		t.Errorf("areas = %+v, want %+v", kj.Files, want)
	}
	wantDefault := "mitigations=auto,nosmt coreos.liveiso=scos-9.0.20260101-0 ignition.firstboot ignition.platform.id=metal"
	if kj.Default != wantDefault || kj.Size != len(wantDefault)+1+1023 {
		t.Errorf("default %q size %d", kj.Default, kj.Size)
	}
	if _, err := os.Stat(filepath.Join(b.tree, "EFI/fedora")); err == nil {
		t.Error("EFI/fedora was not renamed to the image's vendor")
	}
}
