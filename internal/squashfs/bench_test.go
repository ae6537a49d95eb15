package squashfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// TestCompareMksquashfs builds SQUASHFS_BENCH_DIR with the native writer and
// with mksquashfs (zstd, the same level and block size, back to back) and
// reports the time ratio, size ratio and peak RSS. scripts/bench-squashfs
// runs it; it is skipped otherwise. SQUASHFS_BENCH_LEVEL sets the zstd
// level (default 15, mksquashfs' default); SQUASHFS_BENCH_MKSQUASHFS_LEVEL
// gives mksquashfs another level (to compare at equal output size).
func TestCompareMksquashfs(t *testing.T) {
	dir := os.Getenv("SQUASHFS_BENCH_DIR")
	if dir == "" {
		t.Skip("set SQUASHFS_BENCH_DIR to compare with mksquashfs")
	}
	level := 15
	if v := os.Getenv("SQUASHFS_BENCH_LEVEL"); v != "" {
		level, _ = strconv.Atoi(v)
	}
	mkLevel := level
	if v := os.Getenv("SQUASHFS_BENCH_MKSQUASHFS_LEVEL"); v != "" {
		mkLevel, _ = strconv.Atoi(v)
	}
	out := os.Getenv("SQUASHFS_BENCH_OUT")
	if out == "" {
		out = t.TempDir()
	}
	start := time.Now()
	tree, err := fstree.FromDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %s in %s", dir, time.Since(start).Round(time.Millisecond))
	runtime.GC()

	nativeImg := filepath.Join(out, "native.sqfs")
	f, err := os.Create(nativeImg)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	nativeSize, err := Write(context.Background(), f, tree, Options{Level: level})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	nativeTime := time.Since(start)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	nativeRSS := ru.Maxrss * 1024

	mkImg := filepath.Join(out, "mksquashfs.sqfs")
	os.Remove(mkImg)
	cmd := exec.Command("mksquashfs", dir, mkImg, "-noappend", "-no-progress", "-quiet",
		"-comp", "zstd", "-Xcompression-level", strconv.Itoa(mkLevel), "-b", "131072",
		"-processors", strconv.Itoa(runtime.GOMAXPROCS(0)))
	cmd.Stderr = os.Stderr
	start = time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("mksquashfs: %v", err)
	}
	mkTime := time.Since(start)
	mkRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
	st, err := os.Stat(mkImg)
	if err != nil {
		t.Fatal(err)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	t.Logf("zstd level: native %d, mksquashfs %d", level, mkLevel)
	t.Logf("native:     %8.2fs %9.1f MiB  peak RSS %6.1f MiB (whole test process, tree included)", nativeTime.Seconds(), mib(nativeSize), mib(nativeRSS))
	t.Logf("mksquashfs: %8.2fs %9.1f MiB  peak RSS %6.1f MiB", mkTime.Seconds(), mib(st.Size()), mib(mkRSS))
	t.Logf("ratios native/mksquashfs: time %.2fx, size %.3fx", nativeTime.Seconds()/mkTime.Seconds(), float64(nativeSize)/float64(st.Size()))
}

// TestRealDirRoundTrip writes SQUASHFS_VERIFY_DIR (a real directory) with
// the native writer, mounts the image and compares it with the source using
// diff -r, and owners, modes, link counts and xattrs with stat/getfattr
// listings. It needs root and is skipped unless the variable is set.
func TestRealDirRoundTrip(t *testing.T) {
	dir := os.Getenv("SQUASHFS_VERIFY_DIR")
	if dir == "" {
		t.Skip("set SQUASHFS_VERIFY_DIR to round-trip a real directory")
	}
	tree, err := fstree.FromDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	img := writeImage(t, tree, Options{})
	mnt := loopMount(t, img, "")
	if out, err := exec.Command("diff", "-r", "--no-dereference", dir, mnt).CombinedOutput(); err != nil {
		t.Fatalf("diff -r %s %s: %v\n%s", dir, mnt, err, tailOf(out))
	}
	listing := func(root string) string {
		// Directory sizes are filesystem-specific and squashfs keeps
		// whole seconds: leave those out.
		cmd := exec.Command("sh", "-c", `{ find . ! -type d -printf '%M %U:%G %n %s %T@ %p %l\n'; find . -type d -printf '%M %U:%G %n - %T@ %p\n'; } | sed 's/\.[0-9]* \./ ./' | sort && getfattr -h -R -P -d -m - -e hex . | grep -v '^$' | sort`)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("listing %s: %v", root, err)
		}
		return string(out)
	}
	if a, b := listing(dir), listing(mnt); a != b {
		tmp := t.TempDir()
		pa, pb := filepath.Join(tmp, "source"), filepath.Join(tmp, "image")
		os.WriteFile(pa, []byte(a), 0o644)
		os.WriteFile(pb, []byte(b), 0o644)
		out, _ := exec.Command("diff", pa, pb).CombinedOutput()
		t.Fatalf("stat/xattr listings differ between %s and the mounted image:\n%s", dir, tailOf(out))
	}
}

func tailOf(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}
