package squashfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/okd-project/scos-builder/internal/fstree"
)

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
