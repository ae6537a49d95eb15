package ostree

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/testutil"
)

func TestDerivedLayer(t *testing.T) {
	requireOstree(t)
	repo, commit := baseCommit(t, rootfsOpts{})
	layers := exportImage(t, repo, commit, exportOpts{})
	var prepSum string
	for sum, p := range objectsByPath(t, repo, commit) {
		if p == "usr/lib/ostree/prepare-root.conf" {
			prepSum = sum
		}
	}
	prepObj := repoPrefix + ObjectPath(prepSum, ObjFile)
	const prepNew = "[composefs]\nenabled = no\n# modified in place\n"
	derived := makeDerivedLayer(t, []derivedEntry{
		// A file modified in place through its hardlink into the repo is
		// re-homed to its checkout path (ostree-ext filter_tar).
		{name: prepObj, typ: tar.TypeReg, mode: 0o644, data: prepNew},
		{name: "usr/lib/ostree/prepare-root.conf", typ: tar.TypeLink, linkname: prepObj},
		{name: "usr/lib/ostree/prepare-root-copy.conf", typ: tar.TypeLink, linkname: prepObj},
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/derived.conf", typ: tar.TypeReg, mode: 0o644, data: "derived=1\n"},
		{name: "etc/hostname", typ: tar.TypeReg, mode: 0o644}, // empty: removed by cleanup_root
		{name: "usr/bin/", typ: tar.TypeDir, mode: 0o700},     // existing dir keeps its metadata
		{name: "usr/bin/hello", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho replaced\n"},
		{name: "usr/bin/derived-tool", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho derived\n"},
		{name: "usr/bin/derived-link", typ: tar.TypeLink, linkname: "usr/bin/derived-tool"},
		{name: "usr/bin/.wh.hi", typ: tar.TypeReg},
		{name: "usr/share/doc/.wh..wh..opq", typ: tar.TypeReg},
		{name: "usr/share/doc/new", typ: tar.TypeReg, mode: 0o644, data: "new doc\n"},
		{name: "usr/local/newdir/file", typ: tar.TypeReg, mode: 0o644, data: "auto parents\n"},
		{name: "var/lib/derived/", typ: tar.TypeDir, mode: 0o755},
		{name: "opt/thing", typ: tar.TypeReg, mode: 0o644, data: "dropped\n"},
		{name: "opt/other", typ: tar.TypeReg, mode: 0o644, data: "dropped\n"},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "tmp/junk", typ: tar.TypeReg, mode: 0o644, data: "dropped\n"},
	})
	res, _, log := importImage(t, buildImage(t, commit, layers, []testLayer{derived}, nil))

	check := func(p string, want func(*fstree.Inode) bool, what string) {
		t.Helper()
		ino, err := res.Root.Lookup(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return
		}
		if !want(ino) {
			t.Errorf("%s: want %s, got %+v", p, what, ino)
		}
	}
	label := func(ino *fstree.Inode) string { v, _ := ino.Xattr(selinuxXattr); return string(v) }
	check("usr/etc/derived.conf", func(i *fstree.Inode) bool { return label(i) == etcLabel }, "parent's etc_t label")
	check("usr/bin/hello", func(i *fstree.Inode) bool { return label(i) == binLabel && i.Size() == 24 }, "replaced content, base label")
	check("usr/bin", func(i *fstree.Inode) bool { return i.Mode == 0o755 }, "base metadata (0755)")
	check("usr/share/doc/new", func(i *fstree.Inode) bool { return label(i) == usrLabel }, "usr_t")
	dt, _ := res.Root.Lookup("usr/bin/derived-tool")
	check("usr/bin/derived-link", func(i *fstree.Inode) bool { return i == dt }, "hardlink of derived-tool")
	check("usr/local/newdir/file", func(i *fstree.Inode) bool { return i.Kind == fstree.KindRegular }, "file under auto-created parents")
	prep, _ := res.Root.Lookup("usr/lib/ostree/prepare-root.conf")
	check("usr/lib/ostree/prepare-root.conf", func(i *fstree.Inode) bool { return i.Size() == int64(len(prepNew)) }, "re-homed modified content")
	check("usr/lib/ostree/prepare-root-copy.conf", func(i *fstree.Inode) bool { return i == prep }, "hardlink of the re-homed file")
	check("var/lib/derived", func(i *fstree.Inode) bool { return i.Kind == fstree.KindDir }, "var kept")
	check("tmp", func(i *fstree.Inode) bool { return i.Kind == fstree.KindDir }, "tmp kept")
	for _, gone := range []string{"usr/bin/hi", "usr/share/doc/owned", "usr/etc/hostname", "opt/thing", "tmp/junk"} {
		if _, err := res.Root.Lookup(gone); !errors.Is(err, fstree.ErrNotExist) {
			t.Errorf("%s still exists (%v)", gone, err)
		}
	}
	if got := res.Stats.Filtered[derived.digest]; got["opt"] != 2 || got["tmp"] != 1 {
		t.Errorf("filtered counts %v, want opt:2 tmp:1", got)
	}
	if res.Stats.InheritedLabels == 0 || !strings.Contains(log, "got their parent directory's SELinux label") {
		t.Errorf("inherited labels not reported (%d): %s", res.Stats.InheritedLabels, log)
	}
	if !strings.Contains(log, "dropped 2 entries under /opt") {
		t.Errorf("log does not report dropped /opt entries:\n%s", log)
	}
	mc := commitOf(t, res, res.Commit)
	for _, k := range []string{MetaManifestDigest, MetaManifest, MetaImageConfig, MetaImporter, MetaTarFiltered} {
		if _, ok := mc.Metadata.Lookup(k); !ok {
			t.Errorf("merge commit lacks %s", k)
		}
	}
	if mc.Timestamp != 1735689600 || mc.Parent != "" || mc.Subject != "" {
		t.Errorf("merge commit timestamp %d parent %q subject %q", mc.Timestamp, mc.Parent, mc.Subject)
	}

	tree, info, err := Deploy(res, DeployOptions{OSName: testOS, Kargs: []string{"rw", "console=ttyS0"}, BootKernelLinks: true})
	if err != nil {
		t.Fatal(err)
	}
	sysroot := materialize(t, tree)
	verifySysroot(t, sysroot, res, info)
	compareWithAdminDeploy(t, sysroot, res, info, func(rel string) bool {
		return rel == "boot/vmlinuz-"+testKver || rel == "boot/.vmlinuz-"+testKver+".hmac"
	})
	// Live rootfs extras: kernel and hmac hardlinked into /boot, aleph file.
	for src, dst := range map[string]string{info.Vmlinuz: "boot/vmlinuz-" + testKver, info.Hmac: "boot/.vmlinuz-" + testKver + ".hmac"} {
		var a, b syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(sysroot, src), &a); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Lstat(filepath.Join(sysroot, dst), &b); err != nil || a.Ino != b.Ino {
			t.Errorf("%s is not a hardlink of %s (%v)", dst, src, err)
		}
	}
	var aleph struct {
		Ref            string `json:"ref"`
		Version        string `json:"version"`
		OstreeCommit   string `json:"ostree-commit"`
		ContainerImage struct {
			Name   string            `json:"image-name"`
			Digest string            `json:"image-digest"`
			Labels map[string]string `json:"image-labels"`
		} `json:"container-image"`
	}
	ab, err := os.ReadFile(filepath.Join(sysroot, ".aleph-version.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ab, &aleph); err != nil {
		t.Fatal(err)
	}
	if aleph.Ref != "ostree-unverified-registry:"+testRef || aleph.ContainerImage.Name != testRef ||
		aleph.OstreeCommit != commit || aleph.Version != "42.20250101.0" ||
		aleph.ContainerImage.Labels[LabelCommit] != commit || aleph.ContainerImage.Digest != res.ConfigDigest {
		t.Errorf("aleph file: %s", ab)
	}
	out := testutil.Run(t, "ostree", "ls", "--repo="+filepath.Join(sysroot, "ostree/repo"), "-X", res.Commit, "/usr/etc/derived.conf")
	if !strings.Contains(out, "0x65, 0x74, 0x63, 0x5f, 0x74") { // "etc_t"
		t.Errorf("derived.conf in the repo lacks the label: %s", out)
	}
	b, err := os.ReadFile(filepath.Join(sysroot, info.DeployPath, "etc/derived.conf"))
	if err != nil || string(b) != "derived=1\n" {
		t.Errorf("deployed /etc/derived.conf: %q %v", b, err)
	}
	diff := testutil.Run(t, "ostree", "diff", "--repo="+filepath.Join(sysroot, "ostree/repo"), res.BaseCommit, res.Commit)
	for _, want := range []string{"A    /usr/bin/derived-tool", "M    /usr/bin/hello", "D    /usr/bin/hi"} {
		if !strings.Contains(diff, want) {
			t.Errorf("ostree diff base merge lacks %q:\n%s", want, diff)
		}
	}
}

func TestBadInput(t *testing.T) {
	requireOstree(t)
	repo, commit := baseCommit(t, rootfsOpts{})
	layers := exportImage(t, repo, commit, exportOpts{chunked: true})
	importImgErr := func(img Image) error {
		store, _ := fstree.OpenStore(filepath.Join(t.TempDir(), "s"))
		_, err := Import(context.Background(), img, store, io.Discard)
		return err
	}
	importErr := func(ti testImage) error { return importImgErr(ti.image()) }
	expect := func(name string, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", name)
			return
		}
		t.Logf("%s: %v", name, err)
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", name, err, w)
			}
		}
	}

	t.Run("tampered object", func(t *testing.T) {
		var target string
		for sum, o := range objectsByPath(t, repo, commit) {
			if o == "usr/lib/os-release" {
				target = sum
			}
		}
		bad := exportImage(t, repo, commit, exportOpts{chunked: true, tamper: target})
		err := importErr(buildImage(t, commit, bad, nil, nil))
		var layer string
		for _, l := range bad {
			if err != nil && strings.Contains(err.Error(), l.digest) {
				layer = l.digest
			}
		}
		expect("tampered", err, target, "checksum mismatch")
		if layer == "" {
			t.Errorf("error does not name the layer: %v", err)
		}
	})
	t.Run("missing commit layer", func(t *testing.T) {
		ti := buildImage(t, commit, []testLayer{layers[1]}, nil, nil)
		expect("missing commit", importErr(ti), "missing commit layer")
	})
	t.Run("no final-diffid", func(t *testing.T) {
		ti := buildImage(t, commit, layers, nil, map[string]string{LabelBootable: "true"})
		err := importErr(ti)
		expect("no final-diffid", err, "not an ostree container image", LabelFinalDiffID, "pass a bootable ostree/bootc container image")
		var ne *NotOstreeImageError
		if !errors.As(err, &ne) {
			t.Errorf("error is %T, want *NotOstreeImageError", err)
		}
	})
	t.Run("not bootable", func(t *testing.T) {
		ti := buildImage(t, commit, layers, nil, map[string]string{LabelFinalDiffID: layers[1].diffID})
		expect("not bootable", importErr(ti), "not an ostree container image", LabelBootable, LabelBootc)
	})
	t.Run("diffid mismatch", func(t *testing.T) {
		img := buildImage(t, commit, layers, nil, nil).image()
		img.Layers[1].DiffID = layers[0].diffID
		expect("diffid", importImgErr(img), "diffid", layers[1].digest)
	})
	derivedCases := []struct {
		name    string
		entries []derivedEntry
		want    string
	}{
		{"dotdot", []derivedEntry{{name: "usr/../../etc/passwd", typ: tar.TypeReg, data: "x"}}, "leaves the tree"},
		{"absolute", []derivedEntry{{name: "/usr/bin/evil", typ: tar.TypeReg, data: "x"}}, "absolute path"},
		{"hardlink dotdot", []derivedEntry{{name: "usr/bin/l", typ: tar.TypeLink, linkname: "../../etc/shadow"}}, "leaves the tree"},
		{"hardlink absolute", []derivedEntry{{name: "usr/bin/l", typ: tar.TypeLink, linkname: "/etc/shadow"}}, "absolute target"},
		{"symlink escape", []derivedEntry{{name: "usr/bin/l", typ: tar.TypeSymlink, linkname: "../../../etc/shadow"}}, "outside the tree"},
		{"through symlink", []derivedEntry{{name: "usr/bin/hi/evil", typ: tar.TypeReg, data: "x"}}, "through symlink"},
		{"not utf-8", []derivedEntry{{name: "usr/bin/\xff", typ: tar.TypeReg, data: "x"}}, "UTF-8"},
		{"device", []derivedEntry{{name: "usr/lib/null", typ: tar.TypeChar}}, "cannot hold"},
	}
	for _, c := range derivedCases {
		t.Run(c.name, func(t *testing.T) {
			d := makeDerivedLayer(t, c.entries)
			err := importErr(buildImage(t, commit, layers, []testLayer{d}, nil))
			expect(c.name, err, c.want, d.digest)
		})
	}
	t.Run("two kernels", func(t *testing.T) {
		repo2, commit2 := baseCommit(t, rootfsOpts{twoKernels: true}) // committed without --bootable: ostree refuses two kernels
		res, _, _ := importImage(t, buildImage(t, commit2, exportImage(t, repo2, commit2, exportOpts{}), nil, nil))
		_, _, err := Deploy(res, DeployOptions{OSName: testOS})
		expect("two kernels", err, "found 2 kernels", testKver, "6.2.0-other.x86_64")
	})
}

// objectsByPath maps content checksums of a commit to one path using them.
func objectsByPath(t *testing.T, repo, commit string) map[string]string {
	r := repoReader{t: t, repo: repo}
	c, _ := DecodeCommit(r.meta(commit, ObjCommit))
	out := map[string]string{}
	var walk func(sum, p string)
	walk = func(sum, p string) {
		dt, _ := DecodeDirTree(r.meta(sum, ObjDirTree))
		for _, f := range dt.Files {
			out[f.Checksum] = strings.TrimPrefix(p+"/"+f.Name, "/")
		}
		for _, d := range dt.Dirs {
			walk(d.TreeChecksum, p+"/"+d.Name)
		}
	}
	walk(c.RootTree, "")
	return out
}
