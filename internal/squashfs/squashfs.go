// Package squashfs writes squashfs 4.0 images from an fstree.Tree, without
// root and without an intermediate copy on disk.
//
// The image holds every kind of fstree entry (regular files, directories,
// symlinks, hardlinks as shared inodes with their link count, character and
// block devices, fifos, sockets), owners, modes, mtimes and extended
// attributes in the user., trusted. and security. namespaces. File data is
// split into blocks (128 KiB by default) compressed in parallel by a bounded
// pool of workers; all-zero blocks are stored as holes; file tails are packed
// into shared fragment blocks; files with equal Content.Digest are stored
// once. Equal trees and options give equal bytes: everything is laid out in
// the tree's sorted walk order, and the only timestamp is Options.MkfsTime.
// The image is padded to a multiple of 4 KiB, as mksquashfs does.
package squashfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// Options control the image.
type Options struct {
	// Compression is the compressor; zstd when empty.
	Compression Compression
	// Level is the compression level; 0 means the compressor's default
	// (zstd 15, gzip 9, as mksquashfs). xz has no level.
	Level int
	// BlockSize is the data block size, a power of two from 4 KiB to
	// 1 MiB; 128 KiB when zero.
	BlockSize int
	// MkfsTime is the creation time recorded in the superblock (seconds
	// since the epoch, usually SOURCE_DATE_EPOCH).
	MkfsTime int64
	// Workers is the number of parallel compressors; GOMAXPROCS when zero.
	Workers int
	// NoTailPacking stores the tail of files larger than a block in a short
	// block of its own (as mksquashfs does by default) instead of packing
	// it into a fragment. Files smaller than a block always go to
	// fragments.
	NoTailPacking bool
	// NoExportTable leaves out the inode lookup table that NFS export and
	// overlayfs' index feature use.
	NoExportTable bool
	// TempDir is where Write spools the image when its writer cannot seek
	// back to patch the superblock; os.TempDir() when empty.
	TempDir string
}

const (
	defaultBlockSize = 128 << 10
	minBlockSize     = 4 << 10
	maxBlockSize     = 1 << 20
	// padding is the multiple the image size is padded to.
	padding = 4096
)

func (o Options) withDefaults() (Options, error) {
	if o.Compression == "" {
		o.Compression = Zstd
	}
	known := false
	for _, c := range Compressions {
		known = known || c == o.Compression
	}
	if !known {
		return o, fmt.Errorf("unknown compression %q (valid: zstd, gzip, xz)", o.Compression)
	}
	if o.Level == 0 {
		o.Level = o.Compression.DefaultLevel()
	}
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	if o.BlockSize < minBlockSize || o.BlockSize > maxBlockSize || o.BlockSize&(o.BlockSize-1) != 0 {
		return o, fmt.Errorf("block size %d is not a power of two from %d to %d", o.BlockSize, minBlockSize, maxBlockSize)
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MkfsTime < 0 || o.MkfsTime > 0xffffffff {
		return o, fmt.Errorf("mkfs time %d does not fit the squashfs 32-bit timestamp", o.MkfsTime)
	}
	return o, nil
}

// WriteAt writes the image of t into w starting at byte base and returns
// its length (padded to 4 KiB). It writes sequentially except for the
// superblock, which is written last at base.
func WriteAt(ctx context.Context, w io.WriterAt, base int64, t *fstree.Tree, opts Options) (int64, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return 0, fmt.Errorf("writing squashfs: %w", err)
	}
	if t == nil || t.Root == nil || t.Root.Kind != fstree.KindDir {
		return 0, errors.New("writing squashfs: the tree has no root directory")
	}
	b, err := newBuilder(opts, w, base)
	if err != nil {
		return 0, fmt.Errorf("writing squashfs: %w", err)
	}
	defer b.comp.close()
	n, err := b.build(ctx, t)
	if err != nil {
		return 0, fmt.Errorf("writing squashfs: %w", err)
	}
	return n, nil
}

// Write writes the image of t to w and returns its length. When w is an
// *os.File the image is written in place at the file's current offset;
// otherwise it is spooled through a temporary file in Options.TempDir.
func Write(ctx context.Context, w io.Writer, t *fstree.Tree, opts Options) (int64, error) {
	if f, ok := w.(*os.File); ok {
		off, err := f.Seek(0, io.SeekCurrent)
		if err == nil {
			n, err := WriteAt(ctx, f, off, t, opts)
			if err != nil {
				return 0, err
			}
			if _, err := f.Seek(off+n, io.SeekStart); err != nil {
				return 0, fmt.Errorf("writing squashfs: %w", err)
			}
			return n, nil
		}
	}
	tmp, err := os.CreateTemp(opts.TempDir, "squashfs-*")
	if err != nil {
		return 0, fmt.Errorf("writing squashfs: creating spool file: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	n, err := WriteAt(ctx, tmp, 0, t, opts)
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(w, io.NewSectionReader(tmp, 0, n)); err != nil {
		return 0, fmt.Errorf("writing squashfs: copying spooled image: %w", err)
	}
	return n, nil
}
