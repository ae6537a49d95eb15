package stages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/bootconfig"
	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/initrd"
	"github.com/okd-project/scos-builder/internal/isomaster"
	"github.com/okd-project/scos-builder/internal/ostree"
	"github.com/okd-project/scos-builder/recipes"
)

// imageSourcePaths are the parts of the deployed OS the boot stages read
// with ordinary tools: live templates, image.json, coreos-installer's
// example config, os-release and the EFI binaries (all three places
// osbuild's makeefi looks).
var imageSourcePaths = []string{
	"usr/share/coreos-assembler", "usr/share/coreos-installer", "usr/lib/os-release", "etc/os-release",
	"usr/lib/efi", "usr/lib/bootupd/updates/EFI", "boot/efi/EFI",
}

// imageJSON is the part of usr/share/coreos-assembler/image.json the live
// stages read.
type imageJSON struct {
	LiveRootfsFSType    string   `json:"live-rootfs-fstype"`
	LiveRootfsFSOptions string   `json:"live-rootfs-fsoptions"`
	ExtraKargs          []string `json:"extra-kargs"`
}

// osImage is what the boot stages know about the deployed OS.
type osImage struct {
	sysroot   *Sysroot
	root      *fstree.Tree // the deployment's filesystem
	osRelease map[string]string
	image     imageJSON
	// src holds imageSourcePaths copied out of the tree.
	src string
}

// loadOSImage decodes the sysroot and copies the boot-relevant files of
// the deployment into workDir/src.
func loadOSImage(rc *builder.RunContext) (*osImage, error) {
	sr, err := ReadSysroot(rc.Inputs[TypeSysrootDeploy], rc.Inputs[TypeOstreeImport])
	if err != nil {
		return nil, err
	}
	root, err := sr.DeployedRoot()
	if err != nil {
		return nil, err
	}
	img := &osImage{sysroot: sr, root: root, src: filepath.Join(rc.WorkDir, "src")}
	if err := root.CopyOut(img.src, imageSourcePaths...); err != nil {
		return nil, err
	}
	for _, p := range []string{"usr/lib/os-release", "etc/os-release"} {
		if b, err := os.ReadFile(filepath.Join(img.src, p)); err == nil {
			img.osRelease = bootconfig.ParseOSRelease(b)
			break
		}
	}
	if img.osRelease == nil {
		return nil, errors.New("the OS image has no usr/lib/os-release")
	}
	b, err := os.ReadFile(filepath.Join(img.src, "usr/share/coreos-assembler/image.json"))
	if err == nil {
		if err := json.Unmarshal(b, &img.image); err != nil {
			return nil, fmt.Errorf("decoding usr/share/coreos-assembler/image.json: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return img, nil
}

// version is the OS build version (os-release OSTREE_VERSION).
func (img *osImage) version(fallback string) string {
	if v := img.osRelease["OSTREE_VERSION"]; v != "" {
		return v
	}
	return fallback
}

// LiveRootfsOptions decide rootfs.img.
type LiveRootfsOptions struct {
	// Builder is native or mksquashfs (erofs always uses mkfs.erofs).
	Builder string `json:"builder"`
	// FSType overrides the image's live-rootfs-fstype when set.
	FSType string `json:"fstype,omitempty"`
	// Defaults apply where the image's image.json says nothing.
	Defaults recipes.ImageDefaults `json:"defaults"`
	// Release is the version stamp when os-release has no OSTREE_VERSION.
	Release         string `json:"release"`
	SourceDateEpoch int64  `json:"source-date-epoch"`
}

// Validate implements builder.Options.
func (o LiveRootfsOptions) Validate() error {
	if o.Builder != "native" && o.Builder != "mksquashfs" {
		return fmt.Errorf("unknown rootfs builder %q (valid: native, mksquashfs)", o.Builder)
	}
	if o.FSType != "" && o.FSType != "squashfs" && o.FSType != "erofs" {
		return fmt.Errorf("unknown rootfs fstype %q (valid: squashfs, erofs)", o.FSType)
	}
	if o.FSType == "erofs" && o.Builder == "mksquashfs" {
		return errors.New("--rootfs-builder mksquashfs cannot write an erofs rootfs")
	}
	return nil
}

// LiveRootfs writes rootfs.img: the sysroot as squashfs (or erofs) at byte
// 124 of a newc cpio.
type LiveRootfs struct{ Opts LiveRootfsOptions }

func (s *LiveRootfs) Type() string             { return TypeLiveRootfs }
func (s *LiveRootfs) Version() int             { return 1 }
func (s *LiveRootfs) Options() builder.Options { return s.Opts }
func (s *LiveRootfs) Inputs() []string         { return []string{TypeOstreeImport, TypeSysrootDeploy} }

// Tools lists mkfs.erofs always: the image's image.json, read only when
// the stage runs, may ask for an erofs rootfs.
func (s *LiveRootfs) Tools() []string {
	if s.Opts.Builder == "mksquashfs" {
		return []string{"mkfs.erofs", "mksquashfs"}
	}
	return []string{"mkfs.erofs"}
}

func (s *LiveRootfs) Run(ctx context.Context, rc *builder.RunContext) error {
	img, err := loadOSImage(rc)
	if err != nil {
		return err
	}
	fstype := firstNonEmpty(s.Opts.FSType, img.image.LiveRootfsFSType, s.Opts.Defaults.LiveRootfsFSType, "squashfs")
	fsoptions := s.Opts.Defaults.LiveRootfsFSOptions
	if img.image.LiveRootfsFSOptions != "" && (img.image.LiveRootfsFSType == "" || img.image.LiveRootfsFSType == fstype) {
		fsoptions = img.image.LiveRootfsFSOptions
	}
	if fstype != img.image.LiveRootfsFSType && s.Opts.FSType != "" {
		// Options written for the image's own fstype do not apply.
		fsoptions = ""
	}
	builderName := initrd.Builder(s.Opts.Builder)
	if fstype == "erofs" {
		builderName = initrd.MkfsEROFS
	}
	if builderName != initrd.Native && os.Geteuid() != 0 {
		hint := "use --rootfs-builder native"
		if fstype == "erofs" {
			hint = "pass --rootfs-fstype squashfs to build a squashfs rootfs natively"
		}
		return fmt.Errorf("the %s rootfs builder writes the tree with real owners and SELinux labels and needs root; run as root or %s", builderName, hint)
	}
	version := img.version(s.Opts.Release)
	rc.Progress.Message("writing rootfs.img (%s with %s, options %q)", fstype, builderName, fsoptions)
	out, err := os.Create(filepath.Join(rc.OutDir, RootfsImgFile))
	if err != nil {
		return err
	}
	n, err := initrd.WriteRootfsImg(ctx, out, img.sysroot.Tree, initrd.RootfsOptions{
		Version: version, FSType: initrd.FSType(fstype), Builder: builderName,
		FSOptions: strings.Fields(fsoptions), MkfsTime: s.Opts.SourceDateEpoch, TempDir: rc.WorkDir,
	})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing rootfs.img: %w", err)
	}
	rc.Progress.Message("rootfs.img: %d MiB", n>>20)
	return nil
}

// LiveInitrdOptions decide initrd.img.
type LiveInitrdOptions struct {
	Release         string `json:"release"`
	SourceDateEpoch int64  `json:"source-date-epoch"`
}

// Validate implements builder.Options.
func (o LiveInitrdOptions) Validate() error { return nil }

// LiveInitrd writes vmlinuz and initrd.img (the image's initramfs plus the
// live stamps, which pin rootfs.img by its stream hash).
type LiveInitrd struct{ Opts LiveInitrdOptions }

func (s *LiveInitrd) Type() string             { return TypeLiveInitrd }
func (s *LiveInitrd) Version() int             { return 1 }
func (s *LiveInitrd) Options() builder.Options { return s.Opts }
func (s *LiveInitrd) Inputs() []string {
	return []string{TypeOstreeImport, TypeSysrootDeploy, TypeLiveRootfs}
}
func (s *LiveInitrd) Tools() []string { return nil }

func (s *LiveInitrd) Run(ctx context.Context, rc *builder.RunContext) error {
	img, err := loadOSImage(rc)
	if err != nil {
		return err
	}
	kver := img.sysroot.Info.KernelVersion
	modDir := "usr/lib/modules/" + kver
	if err := img.root.CopyOut(rc.WorkDir, modDir+"/vmlinuz", modDir+"/initramfs.img"); err != nil {
		return err
	}
	if err := linkOrCopy(filepath.Join(rc.WorkDir, modDir, "vmlinuz"), filepath.Join(rc.OutDir, KernelFile)); err != nil {
		return fmt.Errorf("writing vmlinuz: %w", err)
	}
	base, err := os.Open(filepath.Join(rc.WorkDir, modDir, "initramfs.img"))
	if err != nil {
		return fmt.Errorf("the OS image has no initramfs for kernel %s: %w", kver, err)
	}
	defer base.Close()
	rootfs, err := os.Open(filepath.Join(rc.Inputs[TypeLiveRootfs], RootfsImgFile))
	if err != nil {
		return err
	}
	hash, err := initrd.StreamHash(rootfs)
	rootfs.Close()
	if err != nil {
		return fmt.Errorf("hashing rootfs.img: %w", err)
	}
	features, warning, err := bootconfig.FeaturesJSON(img.src)
	if err != nil {
		return err
	}
	if warning != "" {
		rc.Progress.Message("%s", warning)
	}
	out, err := os.Create(filepath.Join(rc.OutDir, InitrdFile))
	if err != nil {
		return err
	}
	_, err = initrd.WriteLiveInitrd(out, base, initrd.LiveStamps{Version: img.version(s.Opts.Release),
		Features: features, RootfsStreamHash: hash, MTime: s.Opts.SourceDateEpoch})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// BootconfigFile is the live.bootconfig result (volume ID, kargs.json…).
const BootconfigFile = "bootconfig.json"

// TreeDir is the ISO tree inside the live.bootconfig output.
const TreeDir = "tree"

// LiveBootconfigOptions decide the ISO tree.
type LiveBootconfigOptions struct {
	Arch string `json:"arch"`
	// Recipe picks built-in templates when the image has none; RecipeOSName
	// names the volume when the image says nothing.
	Recipe       string `json:"recipe"`
	RecipeOSName string `json:"recipe-osname"`
	// Labels are the OS image's labels (com.coreos.osname).
	Labels map[string]string `json:"labels"`
	// Kargs are appended after coreos.liveiso=<volid>.
	Kargs       []string `json:"kargs"`
	Release     string   `json:"release"`
	SyslinuxDir string   `json:"syslinux-dir,omitempty"`
	// AllowNoEFI builds a BIOS-only ISO when the image has no EFI binaries.
	AllowNoEFI bool `json:"allow-no-efi,omitempty"`
	// Syslinux is the digest of the host's BIOS boot files (see
	// SyslinuxDigest): they come from the host, not the image, so they
	// must be part of the key.
	Syslinux        string `json:"syslinux,omitempty"`
	SourceDateEpoch int64  `json:"source-date-epoch"`
}

// Validate implements builder.Options.
func (o LiveBootconfigOptions) Validate() error { return bootconfig.CheckArch(o.Arch) }

// LiveBootconfig writes the ISO tree: boot configs with karg embed areas,
// efiboot.img, isolinux, the coreos/ metadata and the embed areas.
type LiveBootconfig struct{ Opts LiveBootconfigOptions }

func (s *LiveBootconfig) Type() string             { return TypeLiveBootconfig }
func (s *LiveBootconfig) Version() int             { return 1 }
func (s *LiveBootconfig) Options() builder.Options { return s.Opts }
func (s *LiveBootconfig) Inputs() []string {
	return []string{TypeOstreeImport, TypeSysrootDeploy, TypeLiveRootfs, TypeLiveInitrd}
}
func (s *LiveBootconfig) Tools() []string { return bootconfig.Tools }

func (s *LiveBootconfig) Run(ctx context.Context, rc *builder.RunContext) error {
	img, err := loadOSImage(rc)
	if err != nil {
		return err
	}
	osRelease := img.osRelease
	if osRelease["OSTREE_VERSION"] == "" {
		osRelease["OSTREE_VERSION"] = s.Opts.Release
	}
	osname, version, err := bootconfig.ResolveName(s.Opts.Labels, osRelease, s.Opts.RecipeOSName)
	if err != nil {
		return err
	}
	res, err := bootconfig.Build(ctx, bootconfig.Options{
		SourceRoot: img.src, TreeDir: filepath.Join(rc.OutDir, TreeDir), WorkDir: filepath.Join(rc.WorkDir, "bootconfig"),
		Arch:      s.Opts.Arch,
		Kernel:    filepath.Join(rc.Inputs[TypeLiveInitrd], KernelFile),
		Initramfs: filepath.Join(rc.Inputs[TypeLiveInitrd], InitrdFile),
		Rootfs:    filepath.Join(rc.Inputs[TypeLiveRootfs], RootfsImgFile),
		OSName:    osname, Version: version, AddKargs: s.Opts.Kargs, Recipe: s.Opts.Recipe,
		SyslinuxDir: s.Opts.SyslinuxDir, AllowNoEFI: s.Opts.AllowNoEFI, SourceDateEpoch: s.Opts.SourceDateEpoch, Log: rc.Log,
	})
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		rc.Progress.Message("warning: %s", w)
	}
	rc.Progress.Message("volume ID %q, kernel arguments %q", res.VolumeID, res.Kargs.Default)
	// iso.master needs the isohybrid MBR too: keep a copy beside the tree
	// so that it reads only its input, never the host.
	if mbr := res.Syslinux[bootconfig.IsohybridMBRFile]; mbr != "" {
		if err := copyFile(mbr, filepath.Join(rc.OutDir, bootconfig.IsohybridMBRFile)); err != nil {
			return fmt.Errorf("keeping %s: %w", bootconfig.IsohybridMBRFile, err)
		}
	}
	return writeJSON(rc.OutDir, BootconfigFile, res)
}

// ISOMasterOptions decide the ISO image.
type ISOMasterOptions struct {
	Arch            string `json:"arch"`
	SourceDateEpoch int64  `json:"source-date-epoch"`
}

// Validate implements builder.Options.
func (o ISOMasterOptions) Validate() error { return bootconfig.CheckArch(o.Arch) }

// ISOMaster masters the ISO from the tree with xorriso.
type ISOMaster struct{ Opts ISOMasterOptions }

func (s *ISOMaster) Type() string             { return TypeISOMaster }
func (s *ISOMaster) Version() int             { return 1 }
func (s *ISOMaster) Options() builder.Options { return s.Opts }
func (s *ISOMaster) Inputs() []string         { return []string{TypeLiveBootconfig} }
func (s *ISOMaster) Tools() []string          { return isomaster.Tools }

func (s *ISOMaster) Run(ctx context.Context, rc *builder.RunContext) error {
	var bc bootconfig.Result
	if err := readJSON(rc.Inputs[TypeLiveBootconfig], BootconfigFile, &bc); err != nil {
		return err
	}
	mbr := ""
	if bc.Syslinux[bootconfig.IsohybridMBRFile] != "" {
		mbr = filepath.Join(rc.Inputs[TypeLiveBootconfig], bootconfig.IsohybridMBRFile)
	}
	res, err := isomaster.Master(ctx, filepath.Join(rc.Inputs[TypeLiveBootconfig], TreeDir), filepath.Join(rc.OutDir, ISOFile),
		isomaster.Options{Arch: s.Opts.Arch, VolumeID: bc.VolumeID, VolumeSet: bc.VolumeSet,
			IsohybridMBR: mbr, SourceDateEpoch: s.Opts.SourceDateEpoch, Log: rc.Log})
	if err != nil {
		return err
	}
	rc.Progress.Message("ISO %d MiB, sha256 %s", res.Size>>20, res.SHA256)
	return nil
}

// liveStages are the stages from the import to the mastered ISO.
func liveStages(cfg *Config) []builder.Stage {
	osname := cfg.Recipe.OSName
	if l := cfg.Labels["com.coreos.osname"]; l != "" {
		osname = l
	}
	imageRef := cfg.OSImage
	if cfg.Resolved != nil {
		imageRef = cfg.Resolved.OSImage
	}
	blsKargs := append(append([]string(nil), cfg.Recipe.Kargs...), cfg.Recipe.Defaults.ExtraKargs...)
	liveKargs := append(append([]string(nil), cfg.Recipe.Kargs...), cfg.Kargs...)
	return []builder.Stage{
		&OstreeImport{Opts: OstreeImportOptions{ImageRef: imageRef, Importer: ostree.ImporterVersion}},
		&SysrootDeploy{Opts: SysrootDeployOptions{OSName: osname, ImageRef: imageRef, Kargs: blsKargs, SourceDateEpoch: cfg.SourceDateEpoch}},
		&LiveRootfs{Opts: LiveRootfsOptions{Builder: cfg.RootfsBuilder, FSType: cfg.RootfsFSType, Defaults: cfg.Recipe.Defaults,
			Release: cfg.Release, SourceDateEpoch: cfg.SourceDateEpoch}},
		&LiveInitrd{Opts: LiveInitrdOptions{Release: cfg.Release, SourceDateEpoch: cfg.SourceDateEpoch}},
		&LiveBootconfig{Opts: LiveBootconfigOptions{Arch: cfg.Arch, Recipe: cfg.Recipe.Name, RecipeOSName: cfg.Recipe.OSName,
			Labels: cfg.Labels, Kargs: liveKargs, Release: cfg.Release, SyslinuxDir: cfg.SyslinuxDir, AllowNoEFI: cfg.AllowNoEFI, Syslinux: SyslinuxDigest(cfg.Arch, cfg.SyslinuxDir),
			SourceDateEpoch: cfg.SourceDateEpoch}},
		&ISOMaster{Opts: ISOMasterOptions{Arch: cfg.Arch, SourceDateEpoch: cfg.SourceDateEpoch}},
	}
}

// SyslinuxDigest is a sha256 over the host's BIOS boot files (name and
// content), or "" when there are none (aarch64, or not installed: then
// live.bootconfig reports which package to install).
func SyslinuxDigest(arch, dir string) string {
	if arch != "x86_64" {
		return ""
	}
	files, err := bootconfig.FindSyslinux(dir)
	if err != nil {
		return ""
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b, err := os.ReadFile(files[name])
		if err != nil {
			return ""
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
