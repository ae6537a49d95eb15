package ostree

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/testutil"
)

const (
	testKver   = "6.1.0-test.x86_64"
	testOS     = "fedora-coreos"
	testRef    = "quay.io/example/testcoreos:stable"
	binLabel   = "system_u:object_r:bin_t:s0"
	etcLabel   = "system_u:object_r:etc_t:s0"
	usrLabel   = "system_u:object_r:usr_t:s0"
	createdRFC = "2025-01-01T00:00:00Z"
)

// requireOstree skips (fails under CI) without root and the ostree CLI.
func requireOstree(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ostree", "tar", "chattr")
}

type rootfsOpts struct {
	twoKernels bool
}

func writeFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func setLabel(t testing.TB, p, label string) {
	t.Helper()
	if err := unix.Lsetxattr(p, "security.selinux", []byte(label), 0); err != nil {
		t.Fatalf("labelling %s: %v", p, err)
	}
}

// makeRootfs writes a small FCOS-like tree: usr/etc, a kernel, symlinks,
// hardlinks, owners, xattrs (one per file), a zero-sized file and a file
// larger than ostree-ext's inline limit.
func makeRootfs(t testing.TB, dir string, o rootfsOpts) {
	t.Helper()
	for _, d := range []string{"boot", "dev", "proc", "run", "sys", "sysroot", "usr/lib64", "usr/sbin", "var"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64",
		"home": "var/home", "media": "run/media", "mnt": "var/mnt", "opt": "var/opt", "ostree": "sysroot/ostree",
		"root": "var/roothome", "sbin": "usr/sbin", "srv": "var/srv"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "usr/bin/hello"), "#!/bin/sh\necho hello\n", 0o755)
	if err := os.Link(filepath.Join(dir, "usr/bin/hello"), filepath.Join(dir, "usr/bin/hello-hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("hello", filepath.Join(dir, "usr/bin/hi")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "usr/etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n", 0o644)
	writeFile(t, filepath.Join(dir, "usr/etc/shadow"), "root:*:19000:0:99999:\n", 0o000)
	writeFile(t, filepath.Join(dir, "usr/etc/ssh/sshd_config"), "PermitRootLogin no\n", 0o600)
	writeFile(t, filepath.Join(dir, "usr/etc/hostname"), "testhost\n", 0o644)
	if err := os.Symlink("../usr/lib/os-release", filepath.Join(dir, "usr/etc/os-release")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "usr/lib/os-release"), "NAME=\"Test CoreOS\"\nID=testos\nVERSION=\"42.20250101.0\"\nPRETTY_NAME=\"Test CoreOS 42.20250101.0\"\n", 0o644)
	writeFile(t, filepath.Join(dir, "usr/lib/ostree/prepare-root.conf"), "[composefs]\nenabled = no\n", 0o644)
	kdir := filepath.Join(dir, "usr/lib/modules", testKver)
	writeFile(t, filepath.Join(kdir, "vmlinuz"), "this is not really a kernel\n", 0o644)
	writeFile(t, filepath.Join(kdir, "initramfs.img"), "this is not really an initramfs\n", 0o644)
	writeFile(t, filepath.Join(kdir, ".vmlinuz.hmac"), "abc123  vmlinuz\n", 0o644)
	if o.twoKernels {
		k2 := filepath.Join(dir, "usr/lib/modules/6.2.0-other.x86_64")
		writeFile(t, filepath.Join(k2, "vmlinuz"), "another kernel\n", 0o644)
	}
	writeFile(t, filepath.Join(dir, "usr/share/doc/owned"), "owned!!\n", 0o644)
	if err := os.Chown(filepath.Join(dir, "usr/share/doc/owned"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(filepath.Join(dir, "usr/share/doc/owned"), "user.test", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "usr/share/empty"), "", 0o644)
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	writeFile(t, filepath.Join(dir, "usr/share/big.bin"), string(big), 0o644)
	writeFile(t, filepath.Join(dir, "usr/libexec/setuid-helper"), "#!/bin/sh\n", 0o4755)
	setLabel(t, filepath.Join(dir, "usr/bin"), binLabel)
	setLabel(t, filepath.Join(dir, "usr/bin/hello"), binLabel)
	setLabel(t, filepath.Join(dir, "usr/bin/hi"), binLabel)
	setLabel(t, filepath.Join(dir, "usr/etc"), etcLabel)
	setLabel(t, filepath.Join(dir, "usr/etc/passwd"), etcLabel)
	setLabel(t, filepath.Join(dir, "usr/share"), usrLabel)
	setLabel(t, filepath.Join(dir, "usr/share/doc"), usrLabel)
}

// commitRootfs commits a rootfs with the real ostree CLI into a new bare
// repo and returns the repo path and commit checksum.
func commitRootfs(t testing.TB, rootfs string, bootable bool) (string, string) {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "repo")
	testutil.Run(t, "ostree", "init", "--repo="+repo, "--mode=bare")
	args := []string{"commit", "--repo=" + repo, "--branch=exampleos/x86_64/stable",
		"--add-metadata-string=version=42.20250101.0", "--subject=Test CoreOS 42.20250101.0",
		"--timestamp=" + createdRFC, "--tree=dir=" + rootfs}
	if bootable {
		args = append(args, "--bootable")
	}
	out := testutil.Run(t, "ostree", args...)
	return repo, strings.TrimSpace(out)
}

// repoReader reads objects of a bare repository on disk.
type repoReader struct {
	t    testing.TB
	repo string
}

func (r repoReader) meta(sum, typ string) []byte {
	b, err := os.ReadFile(filepath.Join(r.repo, ObjectPath(sum, typ)))
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

type contentObj struct {
	sum    string
	path   string // object file
	st     unix.Stat_t
	target string
	xattrs []fstree.Xattr
	paths  []string // checkout paths using it
}

func (r repoReader) content(sum string) *contentObj {
	p := filepath.Join(r.repo, ObjectPath(sum, ObjFile))
	o := &contentObj{sum: sum, path: p}
	if err := unix.Lstat(p, &o.st); err != nil {
		r.t.Fatal(err)
	}
	if o.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		tgt, err := os.Readlink(p)
		if err != nil {
			r.t.Fatal(err)
		}
		o.target = tgt
	}
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			r.t.Fatal(err)
		}
		o.xattrs = append(o.xattrs, fstree.Xattr{Name: name, Value: v[:m]})
	}
	return o
}

type exportOpts struct {
	chunked bool // put half the content objects in a second (chunk) layer
	v0      bool // legacy tar format
	tamper  string
}

type testLayer struct {
	data   []byte // blob as stored (maybe compressed)
	diffID string
	digest string
}

func newTestLayer(t testing.TB, raw []byte, compression string) testLayer {
	t.Helper()
	l := testLayer{diffID: "sha256:" + sha256Hex(raw)}
	var buf bytes.Buffer
	switch compression {
	case "gzip":
		zw := gzip.NewWriter(&buf)
		zw.Write(raw)
		zw.Close()
	case "zstd":
		zw, _ := zstd.NewWriter(&buf)
		zw.Write(raw)
		zw.Close()
	default:
		buf.Write(raw)
	}
	l.data = buf.Bytes()
	l.digest = "sha256:" + sha256Hex(l.data)
	return l
}

// tarWriter writes ostree-ext style entries (mtime 0, numeric owners).
type tarWriter struct {
	t  testing.TB
	tw *tar.Writer
	v0 bool
}

func (w *tarWriter) name(p string) string {
	if w.v0 {
		return "./" + p
	}
	return p
}

func (w *tarWriter) hdr(h *tar.Header) {
	h.ModTime = time.Unix(0, 0)
	h.Format = tar.FormatPAX
	if err := w.tw.WriteHeader(h); err != nil {
		w.t.Fatal(err)
	}
}

func (w *tarWriter) dir(p string, mode int64, uid, gid int) {
	w.hdr(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: uid, Gid: gid})
}

func (w *tarWriter) file(p string, b []byte, mode int64) {
	w.hdr(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(b))})
	if _, err := w.tw.Write(b); err != nil {
		w.t.Fatal(err)
	}
}

func (w *tarWriter) link(p, target string, mode int64, uid, gid int) {
	w.hdr(&tar.Header{Typeflag: tar.TypeLink, Name: p, Linkname: target, Mode: mode, Uid: uid, Gid: gid})
}

func (w *tarWriter) repoStructure() {
	w.dir(w.name("sysroot"), 0o755, 0, 0)
	w.dir(w.name("sysroot/ostree"), 0o755, 0, 0)
	w.dir(w.name("sysroot/ostree/repo"), 0o755, 0, 0)
	w.dir(w.name("sysroot/ostree/repo/objects"), 0o755, 0, 0)
	for i := 0; i < 256; i++ {
		w.dir(w.name(fmt.Sprintf("sysroot/ostree/repo/objects/%02x", i)), 0o755, 0, 0)
	}
	for _, d := range []string{"extensions", "refs", "refs/heads", "refs/mirrors", "refs/remotes", "state", "tmp", "tmp/cache"} {
		w.dir(w.name("sysroot/ostree/repo/"+d), 0o755, 0, 0)
	}
	w.file(w.name("sysroot/ostree/repo/config"), []byte("[core]\nrepo_version=1\nmode=bare-split-xattrs\n"), 0o644)
}

func (w *tarWriter) object(sum, typ string, b []byte) {
	w.file(w.name(repoPrefix+ObjectPath(sum, typ)), b, 0o644)
}

// mapPathV1 is ostree-ext's map_path_v1: usr/etc is exported as etc.
func mapPathV1(p string) string {
	if p == "usr/etc" || strings.HasPrefix(p, "usr/etc/") {
		return strings.TrimPrefix(p, "usr/")
	}
	return p
}

// exportImage encapsulates a commit into ostree container layers the way
// ostree-ext's export_final_chunk / export_chunk write them (§1.3, §1.4).
func exportImage(t testing.TB, repo, commit string, o exportOpts) []testLayer {
	t.Helper()
	r := repoReader{t: t, repo: repo}
	cb := r.meta(commit, ObjCommit)
	c, err := DecodeCommit(cb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := &tarWriter{t: t, tw: tar.NewWriter(&buf), v0: o.v0}
	rootMeta, err := DecodeDirMeta(r.meta(c.RootMeta, ObjDirMeta))
	if err != nil {
		t.Fatal(err)
	}
	w.hdr(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: int64(rootMeta.Mode & 0o7777), Uid: int(rootMeta.UID), Gid: int(rootMeta.GID)})
	w.repoStructure()
	w.object(commit, ObjCommit, cb)
	if b, err := os.ReadFile(filepath.Join(repo, ObjectPath(commit, ObjCommitMeta))); err == nil {
		w.object(commit, ObjCommitMeta, b)
	}
	w.object(c.RootMeta, ObjDirMeta, r.meta(c.RootMeta, ObjDirMeta))
	written := map[string]bool{c.RootMeta + ".dirmeta": true}
	objs := map[string]*contentObj{}
	hasVarTmp := false
	var walk func(treeSum, p string)
	walk = func(treeSum, p string) {
		tb := r.meta(treeSum, ObjDirTree)
		if !written[treeSum+".dirtree"] {
			w.object(treeSum, ObjDirTree, tb)
			written[treeSum+".dirtree"] = true
		}
		dt, err := DecodeDirTree(tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range dt.Files {
			if objs[f.Checksum] == nil {
				objs[f.Checksum] = r.content(f.Checksum)
			}
			objs[f.Checksum].paths = append(objs[f.Checksum].paths, strings.TrimPrefix(p+"/"+f.Name, "/"))
		}
		for _, d := range dt.Dirs {
			sub := strings.TrimPrefix(p+"/"+d.Name, "/")
			if sub == "var/tmp" {
				hasVarTmp = true
			}
			if !written[d.MetaChecksum+".dirmeta"] {
				w.object(d.MetaChecksum, ObjDirMeta, r.meta(d.MetaChecksum, ObjDirMeta))
				written[d.MetaChecksum+".dirmeta"] = true
			}
			if sub == "sysroot" {
				continue
			}
			dm, err := DecodeDirMeta(r.meta(d.MetaChecksum, ObjDirMeta))
			if err != nil {
				t.Fatal(err)
			}
			w.dir("./"+mapPathV1(sub), int64(dm.Mode&0o7777), int(dm.UID), int(dm.GID))
			walk(d.TreeChecksum, "/"+sub)
		}
	}
	walk(c.RootTree, "")
	if !hasVarTmp {
		w.dir(w.name("var/tmp"), 0o1777, 0, 0)
	}
	sums := make([]string, 0, len(objs))
	for s := range objs {
		sums = append(sums, s)
	}
	sort.Strings(sums)
	var first, second []string
	for i, s := range sums {
		if o.chunked && i%2 == 1 {
			second = append(second, s)
		} else {
			first = append(first, s)
		}
	}
	writeObjects(w, objs, first, o)
	w.tw.Close()
	layers := []testLayer{newTestLayer(t, buf.Bytes(), "gzip")}
	if o.chunked {
		var cbuf bytes.Buffer
		cw := &tarWriter{t: t, tw: tar.NewWriter(&cbuf), v0: o.v0}
		cw.repoStructure()
		writeObjects(cw, objs, second, o)
		cw.tw.Close()
		layers = append(layers, newTestLayer(t, cbuf.Bytes(), "zstd"))
	}
	return layers
}

func writeObjects(w *tarWriter, objs map[string]*contentObj, sums []string, o exportOpts) {
	xattrsWritten := map[string]bool{}
	for _, sum := range sums {
		obj := objs[sum]
		xb, err := EncodeXattrs(obj.xattrs)
		if err != nil {
			w.t.Fatal(err)
		}
		xsum := sha256Hex(xb)
		objPath := w.name(repoPrefix + ObjectPath(sum, ObjFile))
		if o.v0 {
			xp := w.name(repoPrefix + "xattrs/" + xsum)
			if !xattrsWritten[xsum] {
				w.file(xp, xb, 0o644)
				xattrsWritten[xsum] = true
			}
			w.link(w.name(repoPrefix+ObjectPath(sum, "file.xattrs")), xp, 0o644, 0, 0)
		} else {
			xp := w.name(repoPrefix + ObjectPath(xsum, "file-xattrs"))
			if !xattrsWritten[xsum] {
				w.file(xp, xb, 0o644)
				xattrsWritten[xsum] = true
			}
			w.link(w.name(repoPrefix+ObjectPath(sum, "file-xattrs-link")), xp, 0o644, 0, 0)
		}
		mode := int64(obj.st.Mode & 0o7777)
		uid, gid := int(obj.st.Uid), int(obj.st.Gid)
		if obj.target != "" {
			w.hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: objPath, Linkname: obj.target, Mode: mode, Uid: uid, Gid: gid})
		} else {
			data, err := os.ReadFile(obj.path)
			if err != nil {
				w.t.Fatal(err)
			}
			if o.tamper == sum {
				data = append([]byte("X"), data[1:]...)
			}
			w.hdr(&tar.Header{Typeflag: tar.TypeReg, Name: objPath, Size: int64(len(data)), Mode: mode, Uid: uid, Gid: gid})
			w.tw.Write(data)
		}
		for _, p := range obj.paths {
			name := w.name(mapPathV1(p))
			if obj.target == "" && obj.st.Size == 0 {
				w.hdr(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: uid, Gid: gid})
				continue
			}
			w.link(name, objPath, mode, uid, gid)
		}
	}
}

// testImage assembles config and manifest for ostree layers plus derived
// layers, with the labels ostree-ext writes.
type testImage struct {
	layers   []testLayer
	config   []byte
	manifest []byte
}

func buildImage(t testing.TB, commit string, ostreeLayers []testLayer, derived []testLayer, labels map[string]string) testImage {
	t.Helper()
	all := append(append([]testLayer{}, ostreeLayers...), derived...)
	if labels == nil {
		labels = map[string]string{
			LabelCommit: commit, LabelFinalDiffID: ostreeLayers[len(ostreeLayers)-1].diffID,
			LabelBootable: "true", LabelBootc: "1", LabelLinux: testKver,
			"org.opencontainers.image.version": "42.20250101.0",
		}
	}
	var diffIDs []string
	var mlayers []map[string]any
	for _, l := range all {
		diffIDs = append(diffIDs, l.diffID)
		mlayers = append(mlayers, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
			"digest": l.digest, "size": len(l.data)})
	}
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "created": createdRFC,
		"config": map[string]any{"Labels": labels}, "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	sum := sha256.Sum256(cfg)
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json",
			"digest": "sha256:" + hex.EncodeToString(sum[:]), "size": len(cfg)},
		"layers": mlayers, "annotations": labels})
	return testImage{layers: all, config: cfg, manifest: man}
}

func (ti testImage) image() Image {
	img := Image{Ref: testRef, Manifest: ti.manifest, Config: ti.config}
	for _, l := range ti.layers {
		data := l.data
		img.Layers = append(img.Layers, Layer{Digest: l.digest,
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	}
	return img
}

func importImage(t testing.TB, ti testImage) (*ImportResult, *fstree.Store, string) {
	t.Helper()
	store, err := fstree.OpenStore(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := Import(context.Background(), ti.image(), store, &log)
	if err != nil {
		t.Fatalf("Import: %v\nlog:\n%s", err, log.String())
	}
	return res, store, log.String()
}

// derivedEntry is one entry of a Containerfile-style layer.
type derivedEntry struct {
	name, linkname string
	typ            byte
	mode           int64
	data           string
	uid            int
}

func makeDerivedLayer(t testing.TB, entries []derivedEntry) testLayer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.linkname, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: time.Unix(1735689600, 0), Size: int64(len(e.data)), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.data))
	}
	tw.Close()
	return newTestLayer(t, buf.Bytes(), "none") // uncompressed, as layers in an OCI layout may be
}

// materialize writes a deployed sysroot to disk for the ostree CLI.
func materialize(t testing.TB, tree *fstree.Tree) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sysroot")
	if err := tree.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// listing is the normalized listing of a tree on disk: type, mode, owner,
// nlink, size (not for directories), path, symlink target.
func listing(t testing.TB, root string, skip func(string) bool) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." || skip(rel) {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		size := fmt.Sprint(st.Size)
		if fi.IsDir() {
			size = "-"
		}
		line := fmt.Sprintf("%s %d:%d n%d %s %s", fi.Mode(), st.Uid, st.Gid, st.Nlink, size, rel)
		if fi.Mode()&os.ModeSymlink != 0 {
			tgt, _ := os.Readlink(p)
			line += " -> " + tgt
		}
		line += xattrSummary(p)
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// xattrSummary lists a path's xattrs (sorted) for listings.
func xattrSummary(p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return ""
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		v := make([]byte, 4096)
		m, _ := unix.Lgetxattr(p, name, v)
		fmt.Fprintf(&b, " %s=%q", name, v[:max(m, 0)])
	}
	return b.String()
}
