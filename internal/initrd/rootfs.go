// Package initrd writes the CoreOS live PXE artifacts that wrap the root
// filesystem: rootfs.img (an uncompressed newc cpio whose first member,
// root.squashfs or root.erofs, has its data at byte 124 so the live
// initramfs can loop-mount it in place) and initrd.img (the image's
// initramfs with an appended gzip newc cpio of live stamps, among them the
// stream hash of rootfs.img). It knows nothing about the build pipeline.
package initrd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/okd-project/scos-builder/internal/cpio"
	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/logtail"
	"github.com/okd-project/scos-builder/internal/squashfs"
)

// FSType is the root filesystem type in rootfs.img (image.json
// live-rootfs-fstype).
type FSType string

// The root filesystem types.
const (
	SquashFS FSType = "squashfs"
	EROFS    FSType = "erofs"
)

// Builder is the program that builds the root filesystem.
type Builder string

// The builders. The empty Builder picks Native for squashfs and MkfsEROFS
// for erofs.
const (
	Native     Builder = "native"     // internal/squashfs, straight from the tree, no root needed
	Mksquashfs Builder = "mksquashfs" // squashfs-tools on a materialized copy (root)
	MkfsEROFS  Builder = "mkfs.erofs" // erofs-utils on a materialized copy (root)
)

// RootfsOptions control WriteRootfsImg.
type RootfsOptions struct {
	// Version is written to etc/coreos-live-rootfs ("<version>\n").
	Version string
	// FSType is squashfs (default) or erofs.
	FSType FSType
	// Builder is native, mksquashfs or mkfs.erofs; empty picks by FSType.
	Builder Builder
	// FSOptions are the image's live-rootfs-fsoptions, split into
	// arguments. The external builders get them verbatim; the native
	// builder understands the mksquashfs options ParseMksquashfsOptions
	// lists. Empty means "-comp zstd" for squashfs and "--quiet" for erofs.
	FSOptions []string
	// Squashfs overrides the native writer's options when FSOptions is
	// empty (Compression, Level, BlockSize, Workers...).
	Squashfs *squashfs.Options
	// MkfsTime is SOURCE_DATE_EPOCH: the cpio mtimes and the filesystem's
	// creation time.
	MkfsTime int64
	// TempDir is where external builders materialize the tree.
	TempDir string
}

const (
	// dataOffset is where the filesystem starts in rootfs.img: a 110-byte
	// header plus "root.squashfs\0" (14) or "root.erofs\0" padded to 124.
	dataOffset   = 124
	erofsMagicAt = 1024
)

var erofsMagic = []byte{0xe2, 0xe1, 0xf5, 0xe0}

func (o RootfsOptions) resolve() (RootfsOptions, error) {
	if o.FSType == "" {
		o.FSType = SquashFS
	}
	switch o.FSType {
	case SquashFS:
		if o.Builder == "" {
			o.Builder = Native
		}
		if o.Builder != Native && o.Builder != Mksquashfs {
			return o, fmt.Errorf("builder %q cannot write squashfs (valid: native, mksquashfs)", o.Builder)
		}
		if len(o.FSOptions) == 0 && (o.Builder == Mksquashfs || o.Squashfs == nil) {
			o.FSOptions = []string{"-comp", "zstd"}
		}
	case EROFS:
		if o.Builder == "" {
			o.Builder = MkfsEROFS
		}
		if o.Builder != MkfsEROFS {
			return o, fmt.Errorf("builder %q cannot write erofs (valid: mkfs.erofs)", o.Builder)
		}
		if o.Squashfs != nil {
			return o, errors.New("squashfs options given for an erofs root filesystem")
		}
		if len(o.FSOptions) == 0 {
			o.FSOptions = []string{"--quiet"}
		}
	default:
		return o, fmt.Errorf("unknown root filesystem type %q (valid: squashfs, erofs)", o.FSType)
	}
	if o.Builder == Native && len(o.FSOptions) > 0 && o.Squashfs != nil {
		return o, errors.New("both fs options and native squashfs options given; use one")
	}
	return o, nil
}

// WriteRootfsImg writes rootfs.img into out from byte 0: a newc cpio with
// root.squashfs (or root.erofs) first, its data at byte 124, then etc/ and
// etc/coreos-live-rootfs. The native builder streams the filesystem
// straight into out and patches the size field afterwards. It returns the
// length written (a multiple of 4).
func WriteRootfsImg(ctx context.Context, out io.WriterAt, tree *fstree.Tree, opts RootfsOptions) (int64, error) {
	opts, err := opts.resolve()
	if err != nil {
		return 0, fmt.Errorf("writing rootfs.img: %w", err)
	}
	name := "root.squashfs"
	if opts.FSType == EROFS {
		name = "root.erofs"
	}
	first := cpio.Header{Name: name, Ino: 1, Mode: cpio.ModeRegular | 0o644, NLink: 1, Mtime: uint32(opts.MkfsTime)}
	if cpio.HeaderLen(name) != dataOffset {
		return 0, fmt.Errorf("writing rootfs.img: internal error: %s header is %d bytes", name, cpio.HeaderLen(name))
	}
	hdr, err := first.Marshal()
	if err != nil {
		return 0, fmt.Errorf("writing rootfs.img: %w", err)
	}
	if _, err := out.WriteAt(hdr, 0); err != nil {
		return 0, fmt.Errorf("writing rootfs.img: %w", err)
	}

	var size int64
	switch opts.Builder {
	case Native:
		sq, err := nativeOptions(opts)
		if err != nil {
			return 0, fmt.Errorf("writing rootfs.img: %w", err)
		}
		size, err = squashfs.WriteAt(ctx, out, dataOffset, tree, sq)
		if err != nil {
			return 0, fmt.Errorf("writing rootfs.img: %w", err)
		}
	default:
		size, err = external(ctx, out, tree, opts)
		if err != nil {
			return 0, fmt.Errorf("writing rootfs.img: %w", err)
		}
	}
	first.Size = size
	if hdr, err = first.Marshal(); err != nil {
		return 0, fmt.Errorf("writing rootfs.img: %w", err)
	}
	if _, err := out.WriteAt(hdr, 0); err != nil {
		return 0, fmt.Errorf("writing rootfs.img: patching the size of %s: %w", name, err)
	}

	pos := int64(dataOffset) + size
	var tail bytes.Buffer
	tail.Write(make([]byte, pad4(pos)))
	c := cpio.NewWriter(&tail)
	mtime := uint32(opts.MkfsTime)
	for _, e := range []struct {
		h    cpio.Header
		data string
	}{
		{cpio.Header{Name: "etc", Ino: 2, Mode: cpio.ModeDir | 0o755, NLink: 2, Mtime: mtime}, ""},
		{cpio.Header{Name: "etc/coreos-live-rootfs", Ino: 3, Mode: cpio.ModeRegular | 0o644, NLink: 1, Mtime: mtime}, opts.Version + "\n"},
	} {
		e.h.Size = int64(len(e.data))
		if err := c.WriteEntry(&e.h, strings.NewReader(e.data)); err != nil {
			return 0, fmt.Errorf("writing rootfs.img: %w", err)
		}
	}
	if err := c.Close(); err != nil {
		return 0, fmt.Errorf("writing rootfs.img: %w", err)
	}
	if _, err := out.WriteAt(tail.Bytes(), pos); err != nil {
		return 0, fmt.Errorf("writing rootfs.img: %w", err)
	}
	return pos + int64(tail.Len()), nil
}

func nativeOptions(opts RootfsOptions) (squashfs.Options, error) {
	var sq squashfs.Options
	if opts.Squashfs != nil {
		sq = *opts.Squashfs
	} else {
		var err error
		if sq, err = ParseMksquashfsOptions(opts.FSOptions); err != nil {
			return sq, err
		}
	}
	if sq.MkfsTime == 0 {
		sq.MkfsTime = opts.MkfsTime
	}
	if sq.TempDir == "" {
		sq.TempDir = opts.TempDir
	}
	return sq, nil
}

// mksquashfsIgnored are mksquashfs options that do not change what the
// native writer produces.
var mksquashfsIgnored = map[string]bool{
	"-noappend": true, "-no-recovery": true, "-quiet": true, "-no-progress": true,
	"-progress": true, "-xattrs": true, "-always-use-fragments": true, "-exports": true, "-sparse": true, "-wildcards": true,
}

// ParseMksquashfsOptions maps mksquashfs options (live-rootfs-fsoptions) onto
// the native writer: -comp zstd|gzip|xz, -b SIZE[K|M], -Xcompression-level N,
// -no-exports, -processors N, -mkfs-time/-fstime T, and the no-ops
// -noappend -no-recovery -quiet -no-progress -progress -xattrs -exports
// -sparse -wildcards -always-use-fragments (the native writer always packs
// file tails into fragments). Anything else is an error.
func ParseMksquashfsOptions(args []string) (squashfs.Options, error) {
	// Tails are always packed into fragments (as -always-use-fragments):
	// smaller, and the kernel reads both layouts.
	var o squashfs.Options
	for i := 0; i < len(args); i++ {
		a := args[i]
		if mksquashfsIgnored[a] {
			continue
		}
		val := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("mksquashfs option %s needs a value", a)
			}
			i++
			return args[i], nil
		}
		num := func() (int64, error) {
			v, err := val()
			if err != nil {
				return 0, err
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("mksquashfs option %s: %q is not a number", a, v)
			}
			return n, nil
		}
		switch a {
		case "-comp":
			v, err := val()
			if err != nil {
				return o, err
			}
			o.Compression = squashfs.Compression(v)
			known := false
			for _, c := range squashfs.Compressions {
				known = known || c == o.Compression
			}
			if !known {
				return o, fmt.Errorf("compressor %q is not supported by the native builder (valid: zstd, gzip, xz; or use the mksquashfs builder)", v)
			}
		case "-b":
			v, err := val()
			if err != nil {
				return o, err
			}
			mult := int64(1)
			switch {
			case strings.HasSuffix(v, "K"), strings.HasSuffix(v, "k"):
				mult, v = 1<<10, v[:len(v)-1]
			case strings.HasSuffix(v, "M"), strings.HasSuffix(v, "m"):
				mult, v = 1<<20, v[:len(v)-1]
			}
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return o, fmt.Errorf("mksquashfs option -b: %q is not a size", args[i])
			}
			o.BlockSize = int(n * mult)
		case "-Xcompression-level":
			n, err := num()
			if err != nil {
				return o, err
			}
			o.Level = int(n)
		case "-no-exports":
			o.NoExportTable = true
		case "-processors":
			n, err := num()
			if err != nil {
				return o, err
			}
			o.Workers = int(n)
		case "-mkfs-time", "-fstime":
			n, err := num()
			if err != nil {
				return o, err
			}
			o.MkfsTime = n
		default:
			return o, fmt.Errorf("mksquashfs option %q is not supported by the native builder (supported: -comp, -b, -Xcompression-level, -no-exports, -processors, -mkfs-time, and the no-ops -noappend -no-recovery -quiet -no-progress -xattrs -exports -sparse -wildcards -always-use-fragments); use the mksquashfs builder", a)
		}
	}
	if o.Compression == squashfs.XZ && o.Level != 0 {
		return o, errors.New("mksquashfs option -Xcompression-level does not apply to xz")
	}
	return o, nil
}

// external builds the filesystem with mksquashfs or mkfs.erofs on a
// materialized copy of the tree (root needed for owners and xattrs) and
// copies it into out at dataOffset.
func external(ctx context.Context, out io.WriterAt, tree *fstree.Tree, opts RootfsOptions) (int64, error) {
	tool, pkg := "mksquashfs", "squashfs-tools"
	if opts.Builder == MkfsEROFS {
		tool, pkg = "mkfs.erofs", "erofs-utils"
	}
	path, err := exec.LookPath(tool)
	if err != nil {
		return 0, fmt.Errorf("%s not found on PATH: install the Debian package %s, or use the native builder", tool, pkg)
	}
	if os.Geteuid() != 0 {
		return 0, fmt.Errorf("the %s builder needs root to materialize the tree with owners and xattrs; run as root or use the native builder", tool)
	}
	work, err := os.MkdirTemp(opts.TempDir, "rootfs-")
	if err != nil {
		return 0, fmt.Errorf("creating work directory: %w", err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	if err := tree.Materialize(root); err != nil {
		return 0, err
	}
	img := filepath.Join(work, "fs.img")
	var args []string
	if opts.Builder == Mksquashfs {
		args = []string{root, img, "-noappend", "-no-recovery", "-no-progress"}
		if !hasOption(opts.FSOptions, "-mkfs-time", "-fstime") {
			args = append(args, "-mkfs-time", strconv.FormatInt(opts.MkfsTime, 10))
		}
		args = append(args, opts.FSOptions...)
	} else {
		args = append(args, opts.FSOptions...)
		if !hasOptionPrefix(opts.FSOptions, "-U") {
			// A fixed UUID: mkfs.erofs picks a random one otherwise.
			args = append(args, "-U00000000-0000-0000-0000-000000000000")
		}
		args = append(args, img, root)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	// mksquashfs refuses SOURCE_DATE_EPOCH together with -mkfs-time.
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SOURCE_DATE_EPOCH=") && !strings.HasPrefix(e, "TMPDIR=") {
			env = append(env, e)
		}
	}
	env = append(env, "TMPDIR="+work)
	if opts.Builder == MkfsEROFS {
		env = append(env, "SOURCE_DATE_EPOCH="+strconv.FormatInt(opts.MkfsTime, 10))
	}
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("running %s %s: %w\n%s", tool, strings.Join(args, " "), err, logtail.Last(stderr.String(), 20))
	}
	f, err := os.Open(img)
	if err != nil {
		return 0, fmt.Errorf("opening %s output: %w", tool, err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	magicAt, want := int64(0), []byte("hsqs")
	if opts.Builder == MkfsEROFS {
		magicAt, want = erofsMagicAt, erofsMagic
	}
	if _, err := f.ReadAt(magic, magicAt); err != nil || !bytes.Equal(magic, want) {
		return 0, fmt.Errorf("%s output has no %s magic at byte %d", tool, opts.FSType, magicAt)
	}
	n, err := io.Copy(io.NewOffsetWriter(out, dataOffset), f)
	if err != nil {
		return 0, fmt.Errorf("copying %s output: %w", tool, err)
	}
	return n, nil
}

func hasOption(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			if a == n {
				return true
			}
		}
	}
	return false
}

func hasOptionPrefix(args []string, prefix string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}
