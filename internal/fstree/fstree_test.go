package fstree

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/okd-project/scos-builder/internal/testutil"
)

// capNetRaw is a vfs_cap_data v2 value: cap_net_raw, effective.
var capNetRaw = []byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

func sampleTree(t *testing.T, store *Store) *Tree {
	t.Helper()
	tr := New()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := tr.MkdirAll("usr/bin", 0o755, 0, 0)
	must(err)
	data, err := store.PutBytes([]byte("#!/bin/sh\necho hi\n"))
	must(err)
	bin := &Inode{Kind: KindRegular, Mode: 0o4755, Content: data, Mtime: 7}
	bin.SetXattr("security.selinux", []byte("system_u:object_r:bin_t:s0\x00"))
	bin.SetXattr("security.capability", capNetRaw)
	must(tr.Add("usr/bin/tool", bin))
	must(tr.Add("usr/bin/tool-link", bin))
	must(tr.Add("usr/bin/sh", &Inode{Kind: KindSymlink, Mode: 0o777, Target: "tool"}))
	must(tr.Add("usr/empty", &Inode{Kind: KindRegular, Mode: 0o644, UID: 12, GID: 34}))
	must(tr.Add("usr/fifo", &Inode{Kind: KindFifo, Mode: 0o600}))
	must(tr.Add("usr/null", &Inode{Kind: KindCharDev, Mode: 0o666, Rdev: unix.Mkdev(1, 3)}))
	must(tr.Add("usr/sparse", &Inode{Kind: KindRegular, Mode: 0o644, Content: ZeroContent(1 << 20)}))
	return tr
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := sampleTree(t, store)
	var a bytes.Buffer
	if err := Encode(&a, tr); err != nil {
		t.Fatal(err)
	}
	back, err := Decode(bytes.NewReader(a.Bytes()), store.Resolve)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Encode(&b, back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("round trip differs:\n%s\n---\n%s", a.String(), b.String())
	}
	x, _ := back.Lookup("usr/bin/tool")
	y, _ := back.Lookup("usr/bin/tool-link")
	if x != y {
		t.Fatal("hardlink identity lost")
	}
	if n := back.LinkCounts()[x]; n != 2 {
		t.Fatalf("nlink = %d, want 2", n)
	}
	if v, _ := x.Xattr("security.selinux"); string(v) != "system_u:object_r:bin_t:s0\x00" {
		t.Fatalf("selinux label = %q", v)
	}
}

func TestLinkCountsAndPaths(t *testing.T) {
	tr := New()
	if _, err := tr.MkdirAll("a/b", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.MkdirAll("a/c", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	a, _ := tr.Lookup("a")
	if n := tr.LinkCounts()[a]; n != 4 {
		t.Fatalf("dir nlink = %d, want 4", n)
	}
	if err := tr.Add("../evil", &Inode{Kind: KindRegular}); err == nil {
		t.Fatal("path leaving the tree was accepted")
	}
	if err := tr.Add("missing/x", &Inode{Kind: KindRegular}); err == nil {
		t.Fatal("add under a missing directory was accepted")
	}
	var seen []string
	_ = tr.Walk(func(p string, _ *Inode) error { seen = append(seen, p); return nil })
	want := []string{"", "a", "a/b", "a/c"}
	if len(seen) != len(want) {
		t.Fatalf("walk = %q", seen)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("walk = %q, want %q", seen, want)
		}
	}
	c := tr.Clone()
	if err := c.Remove("a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Lookup("a/b"); err != nil {
		t.Fatal("clone shares directories with the original")
	}
}

func TestMaterialize(t *testing.T) {
	testutil.RequireRoot(t)
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := sampleTree(t, store)
	dir := filepath.Join(t.TempDir(), "root")
	if err := tr.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "usr/bin/tool"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o4755 || st.Nlink != 2 || st.Mtim.Sec != 7 {
		t.Fatalf("tool: mode %o nlink %d mtime %d", st.Mode&0o7777, st.Nlink, st.Mtim.Sec)
	}
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(dir, "usr/bin/tool"), "security.capability", buf)
	if err != nil || !bytes.Equal(buf[:n], capNetRaw) {
		t.Fatalf("security.capability = %v, %v", buf[:n], err)
	}
	if err := unix.Lstat(filepath.Join(dir, "usr/empty"), &st); err != nil || st.Uid != 12 || st.Gid != 34 {
		t.Fatalf("owner %d:%d, %v", st.Uid, st.Gid, err)
	}
	if err := unix.Lstat(filepath.Join(dir, "usr/null"), &st); err != nil || st.Rdev != unix.Mkdev(1, 3) {
		t.Fatalf("rdev %x, %v", st.Rdev, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "usr/bin/sh")); err != nil || target != "tool" {
		t.Fatalf("symlink = %q, %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "usr/sparse")); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("sparse: %v %v", fi, err)
	}
}

func TestCopyOut(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := sampleTree(t, store)
	dir := t.TempDir()
	if err := tr.CopyOut(dir, "usr/bin", "does/not/exist"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "usr/bin/tool"))
	if err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("tool = %q, %v", b, err)
	}
	// Symlinks are written as what they point at inside the tree.
	if b, err := os.ReadFile(filepath.Join(dir, "usr/bin/sh")); err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("usr/bin/sh = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "usr/fifo")); err == nil {
		t.Fatal("copied a path outside the requested subtree")
	}
}

func TestCopyOutResolvesLinksInsideTheTree(t *testing.T) {
	tr := New()
	for _, d := range []string{"usr/lib/os.release.d", "etc", "usr/share/live"} {
		if _, err := tr.MkdirAll(d, 0o755, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	add := func(p string, ino *Inode) {
		t.Helper()
		if err := tr.Add(p, ino); err != nil {
			t.Fatal(err)
		}
	}
	add("usr/lib/os.release.d/os-release-coreos", &Inode{Kind: KindRegular, Mode: 0o644, Content: BytesContent("ID=fedora\n")})
	// FCOS: a relative link to a file outside the copied path.
	add("usr/lib/os-release", &Inode{Kind: KindSymlink, Target: "./os.release.d/os-release-coreos"})
	// An absolute link must resolve inside the tree, never on the host.
	add("etc/hostname", &Inode{Kind: KindRegular, Mode: 0o644, Content: BytesContent("image-host\n")})
	add("usr/share/live/host", &Inode{Kind: KindSymlink, Target: "/etc/hostname"})
	add("usr/share/live/up", &Inode{Kind: KindSymlink, Target: "../../../../../etc/hostname"})
	add("usr/share/live/dangling", &Inode{Kind: KindSymlink, Target: "/nowhere"})
	add("usr/share/live/loop", &Inode{Kind: KindSymlink, Target: "."})
	dir := t.TempDir()
	err := tr.CopyOut(dir, "usr/lib/os-release", "usr/share/live")
	if err == nil || !strings.Contains(err.Error(), "symlink loop") {
		t.Fatalf("a directory symlink loop was not refused: %v", err)
	}
	tr.Remove("usr/share/live/loop")
	dir = t.TempDir()
	if err := tr.CopyOut(dir, "usr/lib/os-release", "usr/share/live"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"usr/lib/os-release": "ID=fedora\n", "usr/share/live/host": "image-host\n", "usr/share/live/up": "image-host\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "usr/share/live/dangling")); err == nil {
		t.Error("a dangling link was written")
	}
	if _, _, err := tr.Resolve("usr/share/live/dangling"); !errors.Is(err, ErrNotExist) {
		t.Errorf("resolving a dangling link: %v", err)
	}
}

func TestPutBytesMatchesPut(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("same bytes either way\n")
	a, err := store.Put(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.PutBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.PutBytes([]byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() || a.Path() != b.Path() || a.Size() != b.Size() || c.Digest() == a.Digest() {
		t.Fatalf("Put %v and PutBytes %v disagree", a, b)
	}
	got, err := os.ReadFile(c.Path())
	if err != nil || string(got) != "other" {
		t.Fatalf("stored %q, %v", got, err)
	}
	if matches, _ := filepath.Glob(filepath.Join(store.Dir(), "*", ".put-*")); len(matches) != 0 {
		t.Fatalf("temporary files left: %v", matches)
	}
}
