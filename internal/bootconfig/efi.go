package bootconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/okd-project/scos-builder/internal/logtail"
)

// ErrNoEFI means the image has no EFI binaries to boot the ISO with.
var ErrNoEFI = errors.New("no EFI binaries found")

// EFILabel is the FAT label of efiboot.img. It differs from the ISO's
// volume ID so the hybrid ESP never races the ISO for /dev/disk/by-label
// (systemd issue 14408), and matches the metal image's ESP.
const EFILabel = "EFI-SYSTEM"

// efiBootName is the removable-media loader name per architecture.
var efiBootName = map[string]string{
	"x86_64":  "BOOTX64.EFI",
	"aarch64": "BOOTAA64.EFI",
}

// efiArchSuffix is the suffix of shim and GRUB file names per architecture.
var efiArchSuffix = map[string]string{
	"x86_64":  "x64",
	"aarch64": "aa64",
}

// FindEFISources returns the image's EFI directories in the order
// coreos-assembler searches them: usr/lib/efi/<pkg>/<version>/EFI (one per
// package: shim and GRUB), else usr/lib/bootupd/updates/EFI, else
// boot/efi/EFI. It returns ErrNoEFI when none exists.
func FindEFISources(root string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, "usr/lib/efi/*/*/EFI"))
	if err != nil {
		return nil, err
	}
	var dirs []string
	seen := map[string]string{}
	for _, m := range matches {
		if !isDir(m) {
			continue
		}
		rel, _ := filepath.Rel(filepath.Join(root, "usr/lib/efi"), m)
		pkg := strings.Split(filepath.ToSlash(rel), "/")[0]
		if prev, ok := seen[pkg]; ok {
			return nil, fmt.Errorf("finding EFI binaries: usr/lib/efi/%s has more than one version (%s and %s)", pkg, prev, m)
		}
		seen[pkg] = m
		dirs = append(dirs, m)
	}
	if len(dirs) > 0 {
		sort.Strings(dirs)
		return dirs, nil
	}
	for _, p := range []string{"usr/lib/bootupd/updates/EFI", "boot/efi/EFI"} {
		if d := filepath.Join(root, p); isDir(d) {
			return []string{d}, nil
		}
	}
	return nil, fmt.Errorf("finding EFI binaries in %s (searched usr/lib/efi/*/*/EFI, usr/lib/bootupd/updates/EFI, boot/efi/EFI): %w", root, ErrNoEFI)
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// EFIVendor returns the vendor directory name (fedora, redhat, centos,
// debian, ...) of an EFI directory: its one entry other than BOOT.
func EFIVendor(efiDir string) (string, error) {
	ents, err := os.ReadDir(efiDir)
	if err != nil {
		return "", fmt.Errorf("finding EFI vendor: %w", err)
	}
	var vendors []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "BOOT" {
			vendors = append(vendors, e.Name())
		}
	}
	if len(vendors) != 1 {
		return "", fmt.Errorf("finding EFI vendor in %s: want exactly one directory besides BOOT, found %q", efiDir, vendors)
	}
	return vendors[0], nil
}

// makeEFIDir merges the EFI sources into dst (which becomes the ESP's EFI
// directory) and lays it out as coreos-assembler does for removable media:
// the fallback loader and its CSV and the vendor copies of shim go, the
// rest of the vendor directory moves into BOOT. When BOOT has no
// BOOT<ARCH>.EFI (Debian ships shim only in the vendor directory), the
// vendor's shim, else its GRUB, becomes it. It returns the vendor name.
func makeEFIDir(dst string, sources []string, arch string) (string, error) {
	for _, src := range sources {
		if err := copyTree(src, dst); err != nil {
			return "", fmt.Errorf("copying EFI binaries: %w", err)
		}
	}
	vendor, err := EFIVendor(dst)
	if err != nil {
		return "", err
	}
	bootDir := filepath.Join(dst, "BOOT")
	vendorDir := filepath.Join(dst, vendor)
	if err := os.MkdirAll(bootDir, 0o755); err != nil {
		return "", err
	}
	bootName := efiBootName[arch]
	suffix := efiArchSuffix[arch]
	if findFold(bootDir, bootName) == "" {
		var from string
		for _, cand := range []string{"shim" + suffix + ".efi", "grub" + suffix + ".efi"} {
			if f := findFold(vendorDir, cand); f != "" {
				from = f
				break
			}
		}
		if from == "" {
			return "", fmt.Errorf("laying out EFI boot directory: no EFI/BOOT/%s and no shim%s.efi or grub%s.efi in EFI/%s: %w", bootName, suffix, suffix, vendor, ErrNoEFI)
		}
		if err := copyFile(filepath.Join(vendorDir, from), filepath.Join(bootDir, bootName), 0o644); err != nil {
			return "", err
		}
	}
	remove := func(dir, pattern string) error {
		ms, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range ms {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
		return nil
	}
	if err := remove(bootDir, "fb*.efi"); err != nil {
		return "", err
	}
	// Debian keeps fallback in the vendor directory; it must not reach BOOT
	// either (with its CSV gone it could only fail).
	if err := remove(vendorDir, "fb*.efi"); err != nil {
		return "", err
	}
	if err := remove(vendorDir, "BOOT*.CSV"); err != nil {
		return "", err
	}
	if err := remove(vendorDir, "shim*.efi"); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(vendorDir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		target := filepath.Join(bootDir, e.Name())
		if err := os.RemoveAll(target); err != nil {
			return "", err
		}
		if err := os.Rename(filepath.Join(vendorDir, e.Name()), target); err != nil {
			return "", err
		}
	}
	if err := os.Remove(vendorDir); err != nil {
		return "", err
	}
	return vendor, nil
}

// findFold returns the name of the entry of dir equal to name ignoring
// case (FAT is case-insensitive), or "".
func findFold(dir, name string) string {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.EqualFold(e.Name(), name) {
			return e.Name()
		}
	}
	return ""
}

// StubGrubCfg is the grub.cfg GRUB reads from the hybrid ESP when firmware
// boots the ISO as a disk through efiboot.img: it finds the ISO by label and
// hands over to the real grub.cfg, which holds the karg embed area.
func StubGrubCfg(volid, vendor string) string {
	return fmt.Sprintf(`search --label "%s" --set root --no-floppy
set prefix=($root)/EFI/%s
echo "Booting via ESP..."
configfile $prefix/grub.cfg
boot
`, volid, vendor)
}

// efiBootImageSize sizes the FAT image like coreos-assembler: the size of
// a tar of the content plus 2 MiB, rounded up to 512 bytes.
func efiBootImageSize(dirs int, fileSizes []int64) int64 {
	size := int64(1024) // tar end blocks
	size += int64(dirs) * 512
	for _, s := range fileSizes {
		size += 512 + (s+511)/512*512
	}
	size += 2 << 20
	return (size + 511) / 512 * 512
}

// MakeEFIBootImage writes img, a FAT file system labelled EFI-SYSTEM that
// holds efiRoot's tree (efiRoot contains EFI/), using mtools on a plain
// file: no loop device, no root. Entries are added in sorted order and
// dated SOURCE_DATE_EPOCH, with a volume serial derived from it, so the
// same input gives the same bytes.
func MakeEFIBootImage(ctx context.Context, efiRoot, img string, epoch int64, look LookPathFunc, log io.Writer) error {
	mformat, err := toolMformat.find(look)
	if err != nil {
		return err
	}
	mmd, err := toolMmd.find(look)
	if err != nil {
		return err
	}
	mcopy, err := toolMcopy.find(look)
	if err != nil {
		return err
	}
	var dirs []string
	files := map[string][]string{} // target dir -> source files
	var sizes []int64
	err = filepath.WalkDir(efiRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(efiRoot, p)
		if rel == "." {
			return nil
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, "::/"+filepath.ToSlash(rel))
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			sizes = append(sizes, fi.Size())
			parent := "::/" + filepath.ToSlash(filepath.Dir(rel))
			if filepath.Dir(rel) == "." {
				parent = "::/"
			}
			files[parent] = append(files[parent], p)
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("making %s: %w", img, err)
	}
	size := efiBootImageSize(len(dirs), sizes)
	f, err := os.Create(img)
	if err != nil {
		return fmt.Errorf("making %s: %w", img, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("making %s: %w", img, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("making %s: %w", img, err)
	}
	env := append(os.Environ(),
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch, 10),
		"MTOOLS_SKIP_CHECK=1",
		"MTOOLSRC=/dev/null",
		"TZ=UTC",
	)
	serial := fmt.Sprintf("%08x", uint32(epoch))
	if err := runTool(ctx, log, env, mformat, "-i", img, "-v", EFILabel, "-N", serial, "::"); err != nil {
		return fmt.Errorf("making %s: %w", img, err)
	}
	if len(dirs) > 0 {
		if err := runTool(ctx, log, env, mmd, append([]string{"-i", img}, dirs...)...); err != nil {
			return fmt.Errorf("making %s: %w", img, err)
		}
	}
	targets := make([]string, 0, len(files))
	for t := range files {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		dest := t
		if !strings.HasSuffix(dest, "/") {
			dest += "/"
		}
		args := append([]string{"-i", img}, files[t]...)
		if err := runTool(ctx, log, env, mcopy, append(args, dest)...); err != nil {
			return fmt.Errorf("making %s: %w", img, err)
		}
	}
	return nil
}

// runTool runs a program, logging its output; on failure the error carries
// the last lines of that output.
func runTool(ctx context.Context, log io.Writer, env []string, path string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if log != nil {
		fmt.Fprintf(log, "+ %s %s\n%s", path, strings.Join(args, " "), out.String())
	}
	if err != nil {
		return fmt.Errorf("running %s: %w: %s", filepath.Base(path), err, logtail.Last(out.String(), 10))
	}
	return nil
}
