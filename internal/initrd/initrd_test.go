package initrd

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/squashfs"
	"github.com/okd-project/scos-builder/internal/testutil"
)

func TestStreamHashVector(t *testing.T) {
	p := testutil.SharedFixtures(t, "live-iso/stream-hash-test-vector.txt")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			want.WriteString(l + "\n")
		}
	}
	input := strings.Repeat("TNdUoOTJgTAfeNYl9anmDpo8CxphoMaAoEESZWdwj45RZXNTHv7Fwsj5", 100000)
	got, err := StreamHash(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if got != want.String() {
		t.Fatalf("stream hash:\n%s\nwant:\n%s", got, want.String())
	}
}

func sampleTree(t *testing.T) *fstree.Tree {
	t.Helper()
	tr := fstree.New()
	d, err := tr.MkdirAll("ostree/deploy/scos/deploy/abc.0/etc", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.SetXattr("security.selinux", []byte("system_u:object_r:etc_t:s0\x00"))
	f := &fstree.Inode{Kind: fstree.KindRegular, Mode: 0o644, Content: fstree.BytesContent(strings.Repeat("os-release\n", 5000))}
	f.SetXattr("security.selinux", []byte("system_u:object_r:etc_t:s0\x00"))
	if err := tr.Add("ostree/deploy/scos/deploy/abc.0/etc/os-release", f); err != nil {
		t.Fatal(err)
	}
	if err := tr.Add("ostree/boot.1", &fstree.Inode{Kind: fstree.KindSymlink, Mode: 0o777, Target: "boot.1.1"}); err != nil {
		t.Fatal(err)
	}
	return tr
}

func cpioList(t *testing.T, archive string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("cpio", "-t", "--quiet")
	cmd.Stdin = f
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func writeRootfs(t *testing.T, tree *fstree.Tree, opts RootfsOptions) (string, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rootfs.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	n, err := WriteRootfsImg(context.Background(), f, tree, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != n || n%4 != 0 {
		t.Fatalf("rootfs.img is %d bytes, WriteRootfsImg said %d (want a multiple of 4)", len(data), n)
	}
	return p, data
}

// checkCpio extracts rootfs.img with GNU cpio and checks its members.
func checkCpio(t *testing.T, img, fsName string, data []byte) string {
	t.Helper()
	testutil.RequireTool(t, "cpio")
	if got, want := cpioList(t, img), []string{fsName, "etc", "etc/coreos-live-rootfs"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cpio -t: %q, want %q", got, want)
	}
	dir := t.TempDir()
	f, _ := os.Open(img)
	defer f.Close()
	cmd := exec.Command("cpio", "-i", "-d", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = dir, f
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	stamp, err := os.ReadFile(filepath.Join(dir, "etc/coreos-live-rootfs"))
	if err != nil || string(stamp) != "9.0.20260101-0\n" {
		t.Fatalf("etc/coreos-live-rootfs = %q (%v)", stamp, err)
	}
	fs, err := os.ReadFile(filepath.Join(dir, fsName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fs, data[124:124+len(fs)]) {
		t.Fatalf("%s does not start at byte 124", fsName)
	}
	return filepath.Join(dir, fsName)
}

func mountAt124(t *testing.T, img, fstype string) string {
	t.Helper()
	testutil.RequireRoot(t)
	mnt := t.TempDir()
	out, err := exec.Command("mount", "-o", "loop,ro,offset=124", "-t", fstype, img, mnt).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "failed to setup loop device") {
			testutil.SkipOrFail(t, "loop mounts are refused here: %s", out)
		}
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	return mnt
}

func checkMounted(t *testing.T, mnt string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(mnt, "ostree/deploy/scos/deploy/abc.0/etc/os-release"))
	if err != nil || string(got) != strings.Repeat("os-release\n", 5000) {
		t.Fatalf("reading os-release from the mounted rootfs: %v", err)
	}
	out, err := exec.Command("getfattr", "--only-values", "-n", "security.selinux", filepath.Join(mnt, "ostree/deploy/scos/deploy/abc.0/etc/os-release")).Output()
	if err != nil || string(out) != "system_u:object_r:etc_t:s0\x00" {
		t.Fatalf("security.selinux on the mounted rootfs: %q (%v)", out, err)
	}
}

func TestRootfsImgNative(t *testing.T) {
	tree := sampleTree(t)
	opts := RootfsOptions{Version: "9.0.20260101-0", MkfsTime: 1700000000}
	img, data := writeRootfs(t, tree, opts)
	if string(data[124:128]) != "hsqs" {
		t.Fatalf("bytes 124..127 are %q, want hsqs", data[124:128])
	}
	_, again := writeRootfs(t, tree, opts)
	if !bytes.Equal(data, again) {
		t.Fatal("two rootfs.img of the same tree differ")
	}
	fs := checkCpio(t, img, "root.squashfs", data)
	testutil.RequireTool(t, "unsquashfs")
	if out, err := exec.Command("unsquashfs", "-lln", fs).CombinedOutput(); err != nil || !strings.Contains(string(out), "abc.0/etc/os-release") {
		t.Fatalf("unsquashfs -lln root.squashfs: %v\n%s", err, out)
	}
	checkMounted(t, mountAt124(t, img, "squashfs"))
}

func TestRootfsImgMksquashfs(t *testing.T) {
	testutil.RequireTool(t, "mksquashfs")
	testutil.RequireRoot(t)
	tree := sampleTree(t)
	opts := RootfsOptions{Version: "9.0.20260101-0", Builder: Mksquashfs, FSOptions: []string{"-comp", "zstd"}, MkfsTime: 1700000000, TempDir: t.TempDir()}
	img, data := writeRootfs(t, tree, opts)
	if string(data[124:128]) != "hsqs" {
		t.Fatalf("bytes 124..127 are %q, want hsqs", data[124:128])
	}
	checkCpio(t, img, "root.squashfs", data)
	checkMounted(t, mountAt124(t, img, "squashfs"))
	_, again := writeRootfs(t, tree, opts)
	if !bytes.Equal(data, again) {
		t.Fatal("two mksquashfs rootfs.img of the same tree differ")
	}
}

func TestRootfsImgEROFS(t *testing.T) {
	testutil.RequireTool(t, "mkfs.erofs")
	testutil.RequireRoot(t)
	tree := sampleTree(t)
	opts := RootfsOptions{Version: "9.0.20260101-0", FSType: EROFS, MkfsTime: 1700000000, TempDir: t.TempDir()}
	img, data := writeRootfs(t, tree, opts)
	if !bytes.Equal(data[124+1024:124+1028], erofsMagic) {
		t.Fatalf("no erofs magic at byte 124+1024")
	}
	checkCpio(t, img, "root.erofs", data)
	checkMounted(t, mountAt124(t, img, "erofs"))
	_, again := writeRootfs(t, tree, opts)
	if !bytes.Equal(data, again) {
		t.Fatal("two erofs rootfs.img of the same tree differ")
	}
}

func TestRootfsOptionErrors(t *testing.T) {
	cases := []struct {
		opts RootfsOptions
		want string
	}{
		{RootfsOptions{FSType: "ext4"}, `unknown root filesystem type "ext4" (valid: squashfs, erofs)`},
		{RootfsOptions{FSType: EROFS, Builder: Native}, `builder "native" cannot write erofs (valid: mkfs.erofs)`},
		{RootfsOptions{Builder: MkfsEROFS}, `builder "mkfs.erofs" cannot write squashfs (valid: native, mksquashfs)`},
		{RootfsOptions{FSOptions: []string{"-comp", "lzo"}}, `compressor "lzo" is not supported by the native builder`},
		{RootfsOptions{FSOptions: []string{"-e", "foo"}}, `mksquashfs option "-e" is not supported by the native builder`},
		{RootfsOptions{FSOptions: []string{"-comp", "xz", "-Xcompression-level", "3"}}, "does not apply to xz"},
		{RootfsOptions{FSOptions: []string{"-b"}}, "mksquashfs option -b needs a value"},
		{RootfsOptions{FSType: EROFS, Squashfs: &squashfs.Options{}}, "squashfs options given for an erofs root filesystem"},
	}
	for _, c := range cases {
		f, err := os.Create(filepath.Join(t.TempDir(), "rootfs.img"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = WriteRootfsImg(context.Background(), f, fstree.New(), c.opts)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.opts, err, c.want)
		}
	}
}

func TestParseMksquashfsOptions(t *testing.T) {
	got, err := ParseMksquashfsOptions(strings.Fields("-comp zstd -Xcompression-level 19 -b 1M -noappend -no-recovery -always-use-fragments -no-exports -processors 3 -mkfs-time 42"))
	if err != nil {
		t.Fatal(err)
	}
	want := squashfs.Options{Compression: squashfs.Zstd, Level: 19, BlockSize: 1 << 20, NoExportTable: true, Workers: 3, MkfsTime: 42}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	got, err = ParseMksquashfsOptions([]string{"-comp", "gzip", "-b", "64K"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (squashfs.Options{Compression: squashfs.Gzip, BlockSize: 64 << 10}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestLiveInitrd(t *testing.T) {
	testutil.RequireTool(t, "cpio", "gzip")
	base := bytes.Repeat([]byte("initramfs"), 111) // 999 bytes: not 4-aligned
	hash, err := StreamHash(bytes.NewReader([]byte("rootfs")))
	if err != nil {
		t.Fatal(err)
	}
	stamps := LiveStamps{Version: "9.0.20260101-0", Features: []byte(`{"installer-config": true}` + "\n"), RootfsStreamHash: hash, MTime: 1700000000}
	var out bytes.Buffer
	n, err := WriteLiveInitrd(&out, bytes.NewReader(base), stamps)
	if err != nil {
		t.Fatal(err)
	}
	data := out.Bytes()
	if int(n) != len(data) || len(data)%4 != 0 {
		t.Fatalf("initrd.img is %d bytes (reported %d), want a multiple of 4", len(data), n)
	}
	if !bytes.Equal(data[:999], base) || data[999] != 0 || data[1000] != 0x1f || data[1001] != 0x8b {
		t.Fatalf("initramfs, NUL padding and gzip magic not where expected: % x", data[995:1004])
	}
	dir := t.TempDir()
	gz := filepath.Join(dir, "stamps.cpio.gz")
	// gzip ignores the trailing NUL padding, as the kernel does.
	if err := os.WriteFile(gz, data[1000:], 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "gzip -dc < stamps.cpio.gz 2>/dev/null | cpio -i -d --quiet")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpacking: %v\n%s", err, out)
	}
	for name, want := range map[string]string{
		"etc/coreos-live-initramfs":   "9.0.20260101-0\n",
		"etc/coreos/features.json":    string(stamps.Features),
		"etc/coreos-live-want-rootfs": hash,
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
	var again bytes.Buffer
	if _, err := WriteLiveInitrd(&again, bytes.NewReader(base), stamps); err != nil || !bytes.Equal(again.Bytes(), data) {
		t.Fatalf("second initrd.img differs (%v)", err)
	}
}

func TestFindKernel(t *testing.T) {
	tr := fstree.New()
	if _, err := FindKernel(tr, ""); err == nil || !strings.Contains(err.Error(), "no directory usr/lib/modules") {
		t.Fatalf("error %v", err)
	}
	add := func(v string) {
		if _, err := tr.MkdirAll("usr/lib/modules/"+v, 0o755, 0, 0); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"vmlinuz", "initramfs.img"} {
			if err := tr.Add("usr/lib/modules/"+v+"/"+n, &fstree.Inode{Kind: fstree.KindRegular, Mode: 0o644, Content: fstree.BytesContent(n + v)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tr.MkdirAll("usr/lib/modules/6.1-no-kernel", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	add("6.12.0-1.el10.x86_64")
	k, err := FindKernel(tr, "/")
	if err != nil || k.Version != "6.12.0-1.el10.x86_64" || k.Vmlinuz.Digest() != fstree.BytesContent("vmlinuz6.12.0-1.el10.x86_64").Digest() {
		t.Fatalf("FindKernel = %+v, %v", k, err)
	}
	add("6.13.0")
	if _, err := FindKernel(tr, ""); err == nil || !strings.Contains(err.Error(), "2 kernels") {
		t.Fatalf("error %v, want 2 kernels", err)
	}
}
