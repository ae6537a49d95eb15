// Package bootconfig lays out the file tree of a CoreOS live ISO: the boot
// configuration and everything coreos-installer, the agent installer and
// the live initramfs look for in it.
//
// Contract: Build reads an image's file system root (never executing
// anything from it) plus the live kernel, initramfs and rootfs files, and
// writes a new directory that iso mastering (package isomaster) turns into
// the ISO:
//
//	EFI/<vendor>/grub.cfg              template, kargs substituted, karg embed area
//	isolinux/{isolinux.cfg,boot.msg}   template (x86_64), karg embed area
//	isolinux/{isolinux.bin,*.c32}      host syslinux (x86_64)
//	images/efiboot.img                 FAT ESP: EFI/BOOT/{BOOT<ARCH>.EFI,grub*.efi,grub.cfg stub,...}
//	images/ignition.img                262144 zero bytes (Ignition embed area)
//	images/pxeboot/{vmlinuz,initrd.img,rootfs.img}
//	coreos/{igninfo.json,kargs.json,features.json,miniso.dat}
//
// The templates come from the image's usr/share/coreos-assembler/live, or
// from a built-in set per recipe when the image has none. The kernel
// arguments, embed areas, kargs.json, volume ID and ESP follow
// coreos-assembler (osbuild stage org.osbuild.coreos.live-artifacts.mono).
// Output is deterministic for the same inputs and SourceDateEpoch.
package bootconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Paths inside the image and the ISO tree.
const (
	LiveTemplateDir = "usr/share/coreos-assembler/live"
	ImageJSON       = "usr/share/coreos-assembler/image.json"

	IgnitionImgSize = 256 * 1024 // images/ignition.img
	MinisoDataSize  = 16 * 1024  // coreos/miniso.dat
)

// ErrArchNotSupported is returned for architectures the live ISO layout
// is not implemented for yet.
var ErrArchNotSupported = errors.New("not supported yet")

// SupportedArches are the architectures Build and isomaster handle.
var SupportedArches = []string{"x86_64", "aarch64"}

// CheckArch returns nil for a supported architecture, an
// ErrArchNotSupported error for ppc64le and s390x, and an error listing
// the valid ones otherwise.
func CheckArch(arch string) error {
	switch arch {
	case "x86_64", "aarch64":
		return nil
	case "ppc64le", "s390x":
		return fmt.Errorf("live ISO for %s: %w (supported: %s)", arch, ErrArchNotSupported, strings.Join(SupportedArches, ", "))
	}
	return fmt.Errorf("unknown architecture %q (valid: x86_64, aarch64, ppc64le, s390x)", arch)
}

// Options are the inputs of Build.
type Options struct {
	// SourceRoot is the image's file system root: templates, image.json,
	// coreos-installer's example config and the EFI binaries are read
	// from it.
	SourceRoot string
	// TreeDir is the ISO tree to create; it must not exist or be empty.
	TreeDir string
	// WorkDir is scratch space (default: a temporary directory).
	WorkDir string
	// Arch is the target architecture (x86_64 or aarch64).
	Arch string
	// Kernel, Initramfs and Rootfs become images/pxeboot/{vmlinuz,
	// initrd.img,rootfs.img}. Rootfs must hold the squashfs (or erofs)
	// image at byte 124.
	Kernel, Initramfs, Rootfs string
	// OSName and Version make the volume ID (see ResolveName).
	OSName, Version string
	// AddKargs are appended after coreos.liveiso=<volid>.
	AddKargs []string
	// Recipe picks the built-in templates when the image has none
	// (BuiltinTemplateRecipes); empty means the image must have them.
	Recipe string
	// SyslinuxDir, if set, is the only place syslinux files are looked up.
	SyslinuxDir string
	// AllowNoEFI builds a BIOS-only tree (x86_64) when the image has no
	// EFI binaries, instead of failing.
	AllowNoEFI bool
	// SourceDateEpoch dates everything Build writes.
	SourceDateEpoch int64
	// LookPath finds external tools (mtools); default exec.LookPath.
	LookPath LookPathFunc
	// Log receives tool output.
	Log io.Writer
}

// Result describes the tree Build wrote.
type Result struct {
	VolumeID  string    `json:"volumeID"`
	VolumeSet string    `json:"volumeSet"`
	Kargs     KargsJSON `json:"kargs"`
	// Vendor is the EFI vendor directory (empty for a BIOS-only tree).
	Vendor string `json:"vendor,omitempty"`
	// Syslinux are the host files used (x86_64); isomaster needs
	// Syslinux[IsohybridMBRFile].
	Syslinux Syslinux `json:"syslinux,omitempty"`
	// TemplateSource is the image's template dir or "builtin:<recipe>".
	TemplateSource string   `json:"templateSource"`
	Warnings       []string `json:"warnings,omitempty"`
}

// imageConfig is the part of coreos-assembler's image.json Build reads.
type imageConfig struct {
	ExtraKargs []string `json:"extra-kargs"`
}

// Build writes the ISO tree described in the package documentation.
func Build(ctx context.Context, opts Options) (*Result, error) {
	if err := CheckArch(opts.Arch); err != nil {
		return nil, err
	}
	for _, in := range []struct{ name, value string }{{"source root", opts.SourceRoot}, {"tree directory", opts.TreeDir},
		{"kernel", opts.Kernel}, {"initramfs", opts.Initramfs}, {"rootfs", opts.Rootfs}} {
		if in.value == "" {
			return nil, fmt.Errorf("building ISO tree: no %s given", in.name)
		}
	}
	if opts.AllowNoEFI && opts.Arch != "x86_64" {
		return nil, fmt.Errorf("building ISO tree: an ISO without EFI boot is possible only on x86_64, not %s", opts.Arch)
	}
	res := &Result{}
	warn := func(s string) {
		if s != "" {
			res.Warnings = append(res.Warnings, s)
		}
	}

	volid, volset, w, err := VolumeID(opts.OSName, opts.Version)
	if err != nil {
		return nil, err
	}
	warn(w)
	res.VolumeID, res.VolumeSet = volid, volset

	imgCfg, err := readImageConfig(opts.SourceRoot)
	if err != nil {
		return nil, err
	}
	kargs, err := LiveKargs(imgCfg.ExtraKargs, volid, opts.AddKargs)
	if err != nil {
		return nil, err
	}

	// Find every host and image input before writing anything.
	var efiSources []string
	if srcs, err := FindEFISources(opts.SourceRoot); err == nil {
		efiSources = srcs
	} else if !errors.Is(err, ErrNoEFI) {
		return nil, fmt.Errorf("building ISO tree: %w", err)
	} else if !opts.AllowNoEFI {
		return nil, fmt.Errorf("building ISO tree: %w (for an x86_64 BIOS-only ISO, pass --allow-no-efi)", err)
	} else {
		warn("the image has no EFI binaries: the ISO boots only with BIOS")
	}
	if opts.Arch == "x86_64" {
		sl, err := FindSyslinux(opts.SyslinuxDir)
		if err != nil {
			return nil, err
		}
		res.Syslinux = sl
	}
	if err := checkRootfs(opts.Rootfs); err != nil {
		return nil, err
	}

	templates, src, err := loadTemplates(opts.SourceRoot, opts.Recipe)
	if err != nil {
		return nil, err
	}
	res.TemplateSource = src
	rendered, kj, err := renderTemplates(templates, kargs)
	if err != nil {
		return nil, err
	}

	tree := opts.TreeDir
	if err := prepareEmptyDir(tree); err != nil {
		return nil, fmt.Errorf("building ISO tree: %w", err)
	}
	for _, f := range rendered {
		mode := fs.FileMode(0o644)
		if f.exec {
			mode = 0o755
		}
		if err := writeFile(tree, f.path, f.data, mode); err != nil {
			return nil, fmt.Errorf("writing template %s: %w", f.path, err)
		}
	}
	// zipl.prm only matters on s390x, which is not built here.
	if err := os.RemoveAll(filepath.Join(tree, "zipl.prm")); err != nil {
		return nil, err
	}
	if opts.Arch != "x86_64" {
		if err := os.RemoveAll(filepath.Join(tree, "isolinux")); err != nil {
			return nil, err
		}
	}

	workDir := opts.WorkDir
	if workDir == "" {
		workDir, err = os.MkdirTemp("", "bootconfig-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(workDir)
	}

	if efiSources != nil {
		efiRoot := filepath.Join(workDir, "esp")
		if err := os.RemoveAll(efiRoot); err != nil {
			return nil, err
		}
		vendor, err := makeEFIDir(filepath.Join(efiRoot, "EFI"), efiSources, opts.Arch)
		if err != nil {
			return nil, fmt.Errorf("building ISO tree: %w", err)
		}
		res.Vendor = vendor
		if err := moveGrubCfgDir(tree, vendor, &kj); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(efiRoot, "EFI", "BOOT", "grub.cfg"), []byte(StubGrubCfg(volid, vendor)), 0o644); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(tree, "images"), 0o755); err != nil {
			return nil, err
		}
		if err := MakeEFIBootImage(ctx, efiRoot, filepath.Join(tree, "images", "efiboot.img"), opts.SourceDateEpoch, opts.LookPath, opts.Log); err != nil {
			return nil, fmt.Errorf("building ISO tree: %w", err)
		}
	} else if err := os.RemoveAll(filepath.Join(tree, "EFI")); err != nil {
		return nil, err
	}

	if opts.Arch == "x86_64" {
		for _, name := range SyslinuxFiles {
			if err := os.MkdirAll(filepath.Join(tree, "isolinux"), 0o755); err != nil {
				return nil, err
			}
			if err := copyFile(res.Syslinux[name], filepath.Join(tree, "isolinux", name), 0o755); err != nil {
				return nil, fmt.Errorf("copying syslinux file: %w", err)
			}
		}
	}

	for name, src := range map[string]string{"vmlinuz": opts.Kernel, "initrd.img": opts.Initramfs, "rootfs.img": opts.Rootfs} {
		if err := os.MkdirAll(filepath.Join(tree, "images", "pxeboot"), 0o755); err != nil {
			return nil, err
		}
		if err := linkOrCopy(src, filepath.Join(tree, "images", "pxeboot", name)); err != nil {
			return nil, fmt.Errorf("adding images/pxeboot/%s: %w", name, err)
		}
	}

	if err := writeFile(tree, "images/ignition.img", make([]byte, IgnitionImgSize), 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(tree, "coreos/miniso.dat", make([]byte, MinisoDataSize), 0o644); err != nil {
		return nil, err
	}
	ign, err := marshalJSON(map[string]string{"file": "images/ignition.img"})
	if err != nil {
		return nil, err
	}
	if err := writeFile(tree, "coreos/igninfo.json", ign, 0o644); err != nil {
		return nil, err
	}
	features, w, err := FeaturesJSON(opts.SourceRoot)
	if err != nil {
		return nil, err
	}
	warn(w)
	if err := writeFile(tree, "coreos/features.json", features, 0o644); err != nil {
		return nil, err
	}

	// Keep only areas whose file is still in the tree, sorted by path.
	var kept []KargsFile
	for _, f := range kj.Files {
		if _, err := os.Stat(filepath.Join(tree, filepath.FromSlash(f.Path))); err == nil {
			kept = append(kept, f)
		}
	}
	kj.Files = kept
	sortKargsFiles(kj.Files)
	if len(kj.Files) == 0 {
		warn("no template has a karg embed area: coreos-installer cannot modify this ISO's kernel arguments")
	} else {
		data, err := kj.Marshal()
		if err != nil {
			return nil, err
		}
		if err := writeFile(tree, "coreos/kargs.json", data, 0o644); err != nil {
			return nil, err
		}
	}
	res.Kargs = kj

	if err := setTreeTimes(tree, opts.SourceDateEpoch); err != nil {
		return nil, err
	}
	return res, nil
}

func readImageConfig(root string) (imageConfig, error) {
	var c imageConfig
	raw, err := os.ReadFile(filepath.Join(root, ImageJSON))
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("reading image config: %w", err)
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("reading image config %s: %w", ImageJSON, err)
	}
	return c, nil
}

func loadTemplates(root, recipe string) ([]templateFile, string, error) {
	dir := filepath.Join(root, LiveTemplateDir)
	if isDir(dir) {
		files, err := loadTemplateDir(dir)
		return files, dir, err
	}
	if recipe == "" {
		return nil, "", fmt.Errorf("loading live templates: the image has no %s and no recipe picks built-in templates (valid: %s)",
			LiveTemplateDir, strings.Join(BuiltinTemplateRecipes(), ", "))
	}
	files, err := builtinTemplates(recipe)
	return files, "builtin:" + recipe, err
}

// moveGrubCfgDir renames the template's EFI/<dir> holding grub.cfg (FCOS
// ships EFI/fedora, RHCOS EFI/vendor) to EFI/<vendor of the image's EFI
// binaries>, which is where GRUB's prefix points.
func moveGrubCfgDir(tree, vendor string, kj *KargsJSON) error {
	matches, _ := filepath.Glob(filepath.Join(tree, "EFI", "*", "grub.cfg"))
	if len(matches) != 1 {
		return fmt.Errorf("building ISO tree: the live templates must have exactly one EFI/*/grub.cfg, found %d", len(matches))
	}
	srcDir := filepath.Dir(matches[0])
	dstDir := filepath.Join(tree, "EFI", vendor)
	if srcDir == dstDir {
		return nil
	}
	if err := os.Rename(srcDir, dstDir); err != nil {
		return fmt.Errorf("building ISO tree: renaming EFI template directory: %w", err)
	}
	oldRel := "EFI/" + filepath.Base(srcDir) + "/grub.cfg"
	for i := range kj.Files {
		if kj.Files[i].Path == oldRel {
			kj.Files[i].Path = "EFI/" + vendor + "/grub.cfg"
		}
	}
	return nil
}

// checkRootfs verifies that the live rootfs image has its file system at
// byte 124, where the live initramfs loop-mounts it from the ISO.
func checkRootfs(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("checking rootfs image: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 124); err == nil && string(buf) == "hsqs" {
		return nil
	}
	if _, err := f.ReadAt(buf, 124+1024); err == nil && string(buf) == "\xe2\xe1\xf5\xe0" {
		return nil
	}
	return fmt.Errorf("checking rootfs image %s: no squashfs (hsqs) at byte 124 nor erofs magic at byte 1148: it must be an uncompressed cpio whose first member is root.squashfs or root.erofs", p)
}

// prepareEmptyDir creates dir, or accepts it if it exists and is empty.
func prepareEmptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s exists and is not empty", dir)
	}
	return nil
}

// setTreeTimes dates every file Build wrote (not the linked pxeboot
// inputs) to SOURCE_DATE_EPOCH.
func setTreeTimes(tree string, epoch int64) error {
	t := time.Unix(epoch, 0)
	pxe := filepath.Join(tree, "images", "pxeboot")
	return filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if filepath.Dir(p) == pxe && !d.IsDir() {
			return nil
		}
		return os.Chtimes(p, t, t)
	})
}
