// Package bootconfigtest makes small image source trees for tests of the
// live ISO tree and mastering: CoreOS-format live templates (with short
// boot menu timeouts), image.json, coreos-installer's example config,
// os-release, and the host's Debian shim and GRUB EFI binaries in one of
// the layouts CoreOS images use; plus a live rootfs image.
package bootconfigtest

import (
	"bytes"
	"embed"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/cpio"
	"github.com/okd-project/scos-builder/internal/testutil"
)

//go:embed testdata
var testdata embed.FS

// EFILayout is where a source tree keeps its EFI binaries.
type EFILayout string

const (
	// EFIUsrLib: usr/lib/efi/{shim,grub}/<version>/EFI (Fedora
	// BootLoaderUpdatesPhase1), shim with EFI/BOOT/BOOT<ARCH>.EFI.
	EFIUsrLib EFILayout = "usr-lib-efi"
	// EFIBootupd: usr/lib/bootupd/updates/EFI (image-mode CoreOS).
	EFIBootupd EFILayout = "bootupd"
	// EFIDebianESP: boot/efi/EFI/debian as Debian installs it: shim only
	// as the vendor's shimx64.efi, no EFI/BOOT.
	EFIDebianESP EFILayout = "debian-esp"
	// EFINone: no EFI binaries at all.
	EFINone EFILayout = "none"
)

// Host paths of Debian's signed shim (shim-signed) and GRUB
// (grub-efi-amd64-signed). Debian's grubx64.efi reads grub.cfg from its
// prefix /EFI/debian on the boot medium, the same path CoreOS's GRUB uses
// with its vendor directory.
const (
	HostShim     = "/usr/lib/shim/shimx64.efi.signed"
	HostMokMgr   = "/usr/lib/shim/mmx64.efi.signed"
	HostFallback = "/usr/lib/shim/fbx64.efi.signed"
	HostGrub     = "/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed"
)

// Options shape a source tree.
type Options struct {
	EFI EFILayout
	// Arch names the loaders (x86_64: x64, aarch64: aa64).
	Arch string
	// NoTemplates leaves out usr/share/coreos-assembler/live.
	NoTemplates bool
	// ExtraKargs go into image.json.
	ExtraKargs []string
}

// SourceTree writes an image source tree under a new temporary directory
// and returns its root.
func SourceTree(t testing.TB, o Options) string {
	t.Helper()
	root := t.TempDir()
	if !o.NoTemplates {
		sub, err := fs.Sub(testdata, "testdata/live")
		if err != nil {
			t.Fatal(err)
		}
		if err := copyFS(sub, filepath.Join(root, "usr/share/coreos-assembler/live")); err != nil {
			t.Fatal(err)
		}
	}
	kargs := `"` + strings.Join(o.ExtraKargs, `", "`) + `"`
	if len(o.ExtraKargs) == 0 {
		kargs = ""
	}
	write(t, root, "usr/share/coreos-assembler/image.json", []byte(`{"extra-kargs": [`+kargs+`], "live-rootfs-fstype": "squashfs"}`+"\n"))
	example, err := testdata.ReadFile("testdata/example-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write(t, root, "usr/share/coreos-installer/example-config.yaml", example)
	write(t, root, "etc/os-release", []byte("ID=scos\nNAME=\"CentOS Stream CoreOS\"\nOSTREE_VERSION='9.0.20260101-0'\n"))

	if o.EFI == EFINone || o.EFI == "" {
		return root
	}
	sfx, boot := "x64", "BOOTX64.EFI"
	if o.Arch == "aarch64" {
		sfx, boot = "aa64", "BOOTAA64.EFI"
	}
	shim := readHost(t, HostShim, "shim-signed")
	mm := readHost(t, HostMokMgr, "shim-signed")
	fb := readHost(t, HostFallback, "shim-signed")
	grub := readHost(t, HostGrub, "grub-efi-amd64-signed")
	csv := []byte("shim" + sfx + ".efi,debian,,This is the boot entry for debian\n")
	switch o.EFI {
	case EFIUsrLib:
		s := "usr/lib/efi/shim/15.8-1/EFI/"
		write(t, root, s+"BOOT/"+boot, shim)
		write(t, root, s+"BOOT/fb"+sfx+".efi", fb)
		write(t, root, s+"debian/shim"+sfx+".efi", shim)
		write(t, root, s+"debian/mm"+sfx+".efi", mm)
		write(t, root, s+"debian/BOOT"+strings.ToUpper(sfx)+".CSV", csv)
		write(t, root, "usr/lib/efi/grub/2.06-13/EFI/debian/grub"+sfx+".efi", grub)
	case EFIBootupd:
		s := "usr/lib/bootupd/updates/EFI/"
		write(t, root, s+"BOOT/"+boot, shim)
		write(t, root, s+"BOOT/fb"+sfx+".efi", fb)
		write(t, root, s+"debian/shim"+sfx+".efi", shim)
		write(t, root, s+"debian/mm"+sfx+".efi", mm)
		write(t, root, s+"debian/grub"+sfx+".efi", grub)
		write(t, root, s+"debian/BOOT"+strings.ToUpper(sfx)+".CSV", csv)
	case EFIDebianESP:
		s := "boot/efi/EFI/debian/"
		write(t, root, s+"shim"+sfx+".efi", shim)
		write(t, root, s+"mm"+sfx+".efi", mm)
		write(t, root, s+"fb"+sfx+".efi", fb)
		write(t, root, s+"grub"+sfx+".efi", grub)
		write(t, root, s+"BOOT"+strings.ToUpper(sfx)+".CSV", csv)
	default:
		t.Fatalf("unknown EFI layout %q", o.EFI)
	}
	return root
}

// Rootfs writes a live rootfs image into dir: an uncompressed newc cpio
// whose first member is root.squashfs (so the squashfs starts at byte
// 124), holding one deployment at ostree/boot.1/<os>/<csum>/0 and the
// given marker in etc/live-marker.
func Rootfs(t testing.TB, dir, marker string) string {
	t.Helper()
	mksquashfs := testutil.RequireTool(t, "mksquashfs")[0]
	src := filepath.Join(dir, "rootfs-src")
	write(t, src, "ostree/deploy/scos/deploy/abc.0/etc/live-marker", []byte(marker+"\n"))
	if err := os.MkdirAll(filepath.Join(src, "ostree/boot.1/scos/0123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../deploy/scos/deploy/abc.0", filepath.Join(src, "ostree/boot.1/scos/0123/0")); err != nil {
		t.Fatal(err)
	}
	sq := filepath.Join(dir, "root.squashfs")
	if out, err := exec.Command(mksquashfs, src, sq, "-noappend", "-all-root", "-comp", "gzip", "-no-progress", "-mkfs-time", "0", "-all-time", "0").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v: %s", err, out)
	}
	data, err := os.ReadFile(sq)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w := cpio.NewWriter(&b)
	if err := w.WriteEntry(&cpio.Header{Name: "root.squashfs", Mode: cpio.ModeRegular | 0o644, Ino: 1, Size: int64(len(data))}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rootfs.img")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readHost(t testing.TB, p, pkg string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		testutil.SkipOrFail(t, "%s missing (install the Debian package %s): %v", p, pkg, err)
	}
	return data
}

func write(t testing.TB, root, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyFS(fsys fs.FS, dst string) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
