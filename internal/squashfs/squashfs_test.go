package squashfs

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/testutil"
)

var propertyCases = []struct {
	name string
	gen  genOptions
	opts Options
}{
	{"small-blocks", genOptions{seed: 1, dirs: 12, entries: 25, blockSize: 4096}, Options{BlockSize: 4096}},
	{"default", genOptions{seed: 2, dirs: 20, entries: 30, blockSize: 128 << 10, hugeZero: 4<<30 + 12345}, Options{}},
	{"bigdir-no-tail-packing", genOptions{seed: 3, dirs: 4, entries: 10, bigDir: 10000, blockSize: 64 << 10}, Options{BlockSize: 64 << 10, NoTailPacking: true, NoExportTable: true}},
	{"gzip", genOptions{seed: 4, dirs: 6, entries: 20, blockSize: 8192}, Options{Compression: Gzip, BlockSize: 8192, Level: 6}},
	{"xz", genOptions{seed: 5, dirs: 6, entries: 20, blockSize: 16384}, Options{Compression: XZ, BlockSize: 16384}},
}

// TestListing compares unsquashfs' long numeric listing with generated trees.
func TestListing(t *testing.T) {
	testutil.RequireTool(t, "unsquashfs")
	for _, c := range propertyCases {
		t.Run(c.name, func(t *testing.T) {
			tree := genTree(c.gen)
			checkListing(t, writeImage(t, tree, c.opts), tree)
		})
	}
}

// TestExtract extracts generated trees with unsquashfs (as root, so owners,
// devices and all xattr namespaces are restored) and compares everything.
func TestExtract(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "unsquashfs", "getfattr")
	for _, c := range propertyCases {
		t.Run(c.name, func(t *testing.T) {
			tree := genTree(c.gen)
			img := writeImage(t, tree, c.opts)
			dir := filepath.Join(t.TempDir(), "x")
			testutil.Run(t, "unsquashfs", "-no-progress", "-d", dir, img)
			checkDir(t, dir, tree, true)
		})
	}
}

// loopMount mounts img read-only and returns the mount point; it skips when
// the kernel refuses loop mounts here.
func loopMount(t *testing.T, img string, extra string) string {
	t.Helper()
	testutil.RequireRoot(t)
	mnt := t.TempDir()
	opts := "loop,ro"
	if extra != "" {
		opts += "," + extra
	}
	out, err := exec.Command("mount", "-o", opts, "-t", "squashfs", img, mnt).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "failed to setup loop device") || strings.Contains(string(out), "permission denied") {
			testutil.SkipOrFail(t, "loop mounts are refused here: %s", out)
		}
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v\n%s", err, out)
		}
	})
	return mnt
}

// TestKernelMount mounts generated images with the Linux squashfs driver and
// compares the mounted tree with the tree and (diff -r) with unsquashfs'
// extraction.
func TestKernelMount(t *testing.T) {
	testutil.RequireTool(t, "unsquashfs", "getfattr", "diff")
	for _, c := range propertyCases {
		t.Run(c.name, func(t *testing.T) {
			tree := genTree(c.gen)
			img := writeImage(t, tree, c.opts)
			mnt := loopMount(t, img, "")
			checkDir(t, mnt, tree, true)
			if c.gen.hugeZero > 0 {
				return // diff would read gigabytes of zeros
			}
			dir := filepath.Join(t.TempDir(), "x")
			testutil.Run(t, "unsquashfs", "-no-progress", "-d", dir, img)
			cmd := exec.Command("diff", "-r", "--no-dereference", dir, mnt)
			out, err := cmd.CombinedOutput()
			if err != nil {
				// GNU diff only reports, and does not compare, special files.
				for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					if !strings.HasPrefix(l, "File ") || !strings.Contains(l, " while file ") {
						t.Errorf("diff -r: %s", l)
					}
				}
			}
		})
	}
}

// TestDeterministic writes the same tree twice, with different worker
// counts, and expects identical bytes.
func TestDeterministic(t *testing.T) {
	tree := genTree(genOptions{seed: 9, dirs: 10, entries: 30, blockSize: 4096})
	a, err := os.ReadFile(writeImage(t, tree, Options{BlockSize: 4096, Workers: 1, MkfsTime: 1700000000}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(writeImage(t, tree.Clone(), Options{BlockSize: 4096, Workers: 7, MkfsTime: 1700000000}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two writes of the same tree differ")
	}
}

// TestWriteToPlainWriter spools through a temporary file when the writer
// cannot seek and gives the same bytes as writing to a file.
func TestWriteToPlainWriter(t *testing.T) {
	tree := genTree(genOptions{seed: 11, dirs: 3, entries: 10, blockSize: 4096})
	var buf bytes.Buffer
	n, err := Write(context.Background(), &buf, tree, Options{BlockSize: 4096, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(writeImage(t, tree, Options{BlockSize: 4096}))
	if err != nil {
		t.Fatal(err)
	}
	if int(n) != buf.Len() || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("spooled image (%d bytes, reported %d) differs from the direct one (%d bytes)", buf.Len(), n, len(want))
	}
}

// TestWriteAtOffset writes an image at an offset of a larger file, as
// rootfs.img does, and mounts it there.
func TestWriteAtOffset(t *testing.T) {
	tree := genTree(genOptions{seed: 12, dirs: 3, entries: 10, blockSize: 4096})
	p := filepath.Join(t.TempDir(), "container")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{0xaa}, 124)); err != nil {
		t.Fatal(err)
	}
	n, err := WriteAt(context.Background(), f, 124, tree, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != 124+n || string(data[124:128]) != "hsqs" || data[0] != 0xaa {
		t.Fatalf("image at offset 124: %d bytes, magic %q", len(data), data[124:128])
	}
	testutil.RequireRoot(t)
	checkDir(t, loopMount(t, p, "offset=124"), tree, true)
}

func TestErrors(t *testing.T) {
	bad := func(mut func(*fstree.Tree)) *fstree.Tree {
		tr := fstree.New()
		mut(tr)
		return tr
	}
	cases := []struct {
		name string
		tree *fstree.Tree
		opts Options
		want string
	}{
		{"compression", fstree.New(), Options{Compression: "lzo"}, `unknown compression "lzo" (valid: zstd, gzip, xz)`},
		{"block size", fstree.New(), Options{BlockSize: 3000}, "block size 3000 is not a power of two"},
		{"zstd level", fstree.New(), Options{Level: 30}, "zstd level 30 out of range"},
		{"xattr namespace", bad(func(tr *fstree.Tree) {
			ino := &fstree.Inode{Kind: fstree.KindFifo}
			ino.SetXattr("system.posix_acl_access", []byte{1})
			tr.Add("f", ino)
		}), Options{}, `"system.posix_acl_access": squashfs stores only the user., trusted. and security. namespaces`},
		{"long name", bad(func(tr *fstree.Tree) {
			tr.Add(strings.Repeat("n", 257), &fstree.Inode{Kind: fstree.KindFifo})
		}), Options{}, "entry name longer than 256 bytes"},
		{"short content", bad(func(tr *fstree.Tree) {
			tr.Add("f", &fstree.Inode{Kind: fstree.KindRegular, Content: shortContent{}})
		}), Options{}, "reading /f: content is shorter than its size"},
		{"device", bad(func(tr *fstree.Tree) {
			tr.Add("d", &fstree.Inode{Kind: fstree.KindCharDev, Rdev: 1 << 45})
		}), Options{}, "does not fit 32 bits"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			_, err := Write(context.Background(), &buf, c.tree, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

type shortContent struct{}

func (shortContent) Size() int64 { return 100000 }
func (shortContent) Open() (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("short")), nil
}
func (shortContent) Digest() string { return "" }

// TestDirIndex checks that large listings get index entries that point at
// directory headers starting with the indexed name.
func TestDirIndex(t *testing.T) {
	var entries []dirEntry
	for i := range 10000 {
		entries = append(entries, dirEntry{name: strings.Repeat("x", i%50) + string(rune('a'+i%26)), ref: uint64(i/300) << 16, num: uint32(i + 1), typ: typeFile})
	}
	listing, index := dirListing(entries)
	if len(index) < len(listing)/metadataSize-1 {
		t.Fatalf("%d index entries for a %d-byte listing", len(index), len(listing))
	}
	last := 0
	for _, ix := range index {
		if ix.pos-last > metadataSize || ix.pos <= last {
			t.Fatalf("index at %d after %d", ix.pos, last)
		}
		last = ix.pos
		nameLen := int(le.Uint16(listing[ix.pos+12+6:])) + 1
		if got := string(listing[ix.pos+12+8 : ix.pos+12+8+nameLen]); got != ix.name {
			t.Fatalf("index at %d names %q, header starts with %q", ix.pos, ix.name, got)
		}
	}
}

// TestCanceled stops a write when the context is canceled, without hanging.
func TestCanceled(t *testing.T) {
	tree := genTree(genOptions{seed: 13, dirs: 10, entries: 30, blockSize: 4096})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f, err := os.Create(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := WriteAt(ctx, f, 0, tree, Options{BlockSize: 4096}); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("error %v, want context canceled", err)
	}
}
