// Package isomaster masters a CoreOS live ISO from a tree laid out by
// package bootconfig, with xorriso.
//
// Contract: Args builds xorriso's argument list as a pure function of the
// options and the tree's boot layout; Master runs it, writes the ISO under
// a temporary name, renames it into place and returns its sha256. The ISO
// has level-1 (8.3, uppercase) primary names, which is all coreos-installer
// reads, plus Rock Ridge and Joliet. x86_64: El Torito BIOS
// (isolinux/isolinux.bin, catalog isolinux/boot.cat) and UEFI
// (images/efiboot.img) entries, an isohybrid MBR and a GPT so the same file
// boots as CD or disk with BIOS or UEFI. aarch64: one UEFI entry and a
// visible /boot.catalog (the agent installer's re-mastering needs it).
// Every date in the ISO is SOURCE_DATE_EPOCH, so the same tree gives the
// same bytes.
package isomaster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/okd-project/scos-builder/internal/bootconfig"
	"github.com/okd-project/scos-builder/internal/logtail"
)

// Tree paths of the boot files.
const (
	BIOSBootImage = "isolinux/isolinux.bin"
	BIOSCatalog   = "isolinux/boot.cat"
	EFIBootImage  = "images/efiboot.img"
	EFICatalog    = "boot.catalog" // EFI-only layouts (aarch64)
)

// Tools are the external programs Master runs (for stage cache keys and
// meta.json tool versions).
var Tools = []string{"xorriso"}

// Options are the inputs of Args and Master.
type Options struct {
	// Arch is the target architecture (x86_64 or aarch64).
	Arch string
	// VolumeID (at most 32 bytes) and VolumeSet, from bootconfig.Result.
	VolumeID, VolumeSet string
	// IsohybridMBR is the path of syslinux's isohdpfx.bin (x86_64), from
	// bootconfig.Result.Syslinux.
	IsohybridMBR string
	// SourceDateEpoch dates the volume and every file.
	SourceDateEpoch int64
	// LookPath finds xorriso; default exec.LookPath.
	LookPath func(string) (string, error)
	// Log receives xorriso's output.
	Log io.Writer
}

// Layout says which El Torito boot images a tree provides.
type Layout struct {
	BIOS bool // isolinux/isolinux.bin
	UEFI bool // images/efiboot.img
}

// DetectLayout looks for the boot images in tree.
func DetectLayout(tree string) Layout {
	exists := func(rel string) bool {
		fi, err := os.Stat(filepath.Join(tree, filepath.FromSlash(rel)))
		return err == nil && fi.Mode().IsRegular()
	}
	return Layout{BIOS: exists(BIOSBootImage), UEFI: exists(EFIBootImage)}
}

// Args returns xorriso's arguments (without the program name) that master
// tree into out.
func Args(opts Options, layout Layout, tree, out string) ([]string, error) {
	if err := bootconfig.CheckArch(opts.Arch); err != nil {
		return nil, err
	}
	if opts.VolumeID == "" || len(opts.VolumeID) > 32 {
		return nil, fmt.Errorf("mastering ISO: volume ID %q must be 1 to 32 bytes", opts.VolumeID)
	}
	if len(opts.VolumeSet) > 128 {
		return nil, fmt.Errorf("mastering ISO: volume set ID %q is longer than 128 bytes", opts.VolumeSet)
	}
	if tree == "" || out == "" {
		return nil, fmt.Errorf("mastering ISO: tree and output path must be set")
	}
	volset := opts.VolumeSet
	if volset == "" {
		volset = opts.VolumeID
	}
	args := []string{
		// Native command before the mkisofs emulation: every file is dated
		// SOURCE_DATE_EPOCH whatever its mtime in the tree.
		"-volume_date", "all_file_dates", "=" + strconv.FormatInt(opts.SourceDateEpoch, 10),
		"-as", "mkisofs",
		"-o", out,
		"-V", opts.VolumeID,
		"-volset", volset,
		"-sysid", "LINUX", // as genisoimage writes it in coreos-assembler's ISOs
		"-rational-rock", "-J", "-joliet-long",
	}
	switch opts.Arch {
	case "x86_64":
		if !layout.BIOS {
			return nil, fmt.Errorf("mastering x86_64 ISO: the tree has no %s", BIOSBootImage)
		}
		if opts.IsohybridMBR == "" {
			return nil, fmt.Errorf("mastering x86_64 ISO: no isohybrid MBR (%s) given", bootconfig.IsohybridMBRFile)
		}
		args = append(args,
			"-isohybrid-mbr", opts.IsohybridMBR,
			"-b", BIOSBootImage, "-c", BIOSCatalog,
			"-no-emul-boot", "-boot-load-size", "4", "-boot-info-table")
		if layout.UEFI {
			args = append(args,
				"-eltorito-alt-boot", "-e", EFIBootImage, "-no-emul-boot",
				"-isohybrid-gpt-basdat")
		}
	case "aarch64":
		if !layout.UEFI {
			return nil, fmt.Errorf("mastering aarch64 ISO: the tree has no %s", EFIBootImage)
		}
		args = append(args, "-c", EFICatalog, "-e", EFIBootImage, "-no-emul-boot")
	}
	return append(args, tree), nil
}

// Result describes a mastered ISO.
type Result struct {
	Path   string
	Size   int64
	SHA256 string
}

// Master runs xorriso to write the ISO of tree to out (replacing it only
// once the new ISO is complete) and returns its size and sha256.
func Master(ctx context.Context, tree, out string, opts Options) (*Result, error) {
	look := opts.LookPath
	if look == nil {
		look = exec.LookPath
	}
	xorriso, err := look("xorriso")
	if err != nil {
		return nil, fmt.Errorf("finding xorriso: %w (install the Debian or Fedora package \"xorriso\")", err)
	}
	tmpf, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("mastering ISO %s: %w", out, err)
	}
	tmp := tmpf.Name()
	tmpf.Close()
	// xorriso refuses to overwrite some existing files; give it a fresh name.
	if err := os.Remove(tmp); err != nil {
		return nil, err
	}
	defer os.Remove(tmp)

	args, err := Args(opts, DetectLayout(tree), tree, tmp)
	if err != nil {
		return nil, err
	}
	var output bytes.Buffer
	cmd := exec.CommandContext(ctx, xorriso, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(opts.SourceDateEpoch, 10), "TZ=UTC")
	cmd.Stdout = &output
	cmd.Stderr = &output
	runErr := cmd.Run()
	if opts.Log != nil {
		fmt.Fprintf(opts.Log, "+ %s %s\n%s", xorriso, strings.Join(args, " "), output.String())
	}
	if runErr != nil {
		return nil, fmt.Errorf("mastering ISO %s: running xorriso: %w: %s", out, runErr, logtail.Last(output.String(), 15))
	}
	sum, size, err := fileSHA256(tmp)
	if err != nil {
		return nil, fmt.Errorf("mastering ISO %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, fmt.Errorf("mastering ISO %s: %w", out, err)
	}
	return &Result{Path: out, Size: size, SHA256: sum}, nil
}

func fileSHA256(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
