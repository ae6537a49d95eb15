package squashfs

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Compression names a squashfs compressor.
type Compression string

// The supported compressors.
const (
	Zstd Compression = "zstd"
	Gzip Compression = "gzip"
	XZ   Compression = "xz"
)

// Compressions lists the supported compressors.
var Compressions = []Compression{Zstd, Gzip, XZ}

// On-disk compressor ids (squashfs_fs.h).
const (
	compIDGzip = 1
	compIDXZ   = 4
	compIDZstd = 6
)

// DefaultLevel returns the level mksquashfs uses when none is given.
func (c Compression) DefaultLevel() int {
	switch c {
	case Zstd:
		return 15
	case Gzip:
		return 9
	}
	return 0
}

// compressor compresses one block. It is safe for concurrent use.
type compressor interface {
	// compress appends the compressed form of src to dst[:0].
	compress(dst, src []byte) ([]byte, error)
	id() uint16
	close()
}

func newCompressor(c Compression, level, blockSize, workers int) (compressor, error) {
	switch c {
	case Zstd:
		if level < 1 || level > 22 {
			return nil, fmt.Errorf("zstd level %d out of range 1..22", level)
		}
		window := blockSize
		if window < metadataSize {
			window = metadataSize
		}
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
			zstd.WithEncoderConcurrency(workers),
			zstd.WithWindowSize(window),
			zstd.WithEncoderCRC(false),
			zstd.WithSingleSegment(true),
			zstd.WithZeroFrames(true),
		)
		if err != nil {
			return nil, fmt.Errorf("creating zstd encoder: %w", err)
		}
		return &zstdCompressor{enc: enc}, nil
	case Gzip:
		if level < 1 || level > 9 {
			return nil, fmt.Errorf("gzip level %d out of range 1..9", level)
		}
		return &zlibCompressor{level: level}, nil
	case XZ:
		if level != 0 {
			return nil, fmt.Errorf("xz takes no compression level (got %d)", level)
		}
		dict := blockSize
		if dict < metadataSize {
			dict = metadataSize
		}
		return &xzCompressor{dict: dict}, nil
	}
	return nil, fmt.Errorf("unknown compression %q (valid: zstd, gzip, xz)", c)
}

type zstdCompressor struct{ enc *zstd.Encoder }

func (z *zstdCompressor) compress(dst, src []byte) ([]byte, error) {
	return z.enc.EncodeAll(src, dst[:0]), nil
}
func (z *zstdCompressor) id() uint16 { return compIDZstd }
func (z *zstdCompressor) close()     { z.enc.Close() }

// zlibCompressor: squashfs "gzip" blocks are zlib streams.
type zlibCompressor struct {
	level int
	pool  sync.Pool
}

type zlibState struct {
	out sliceWriter
	w   *zlib.Writer
}

// sliceWriter appends to a byte slice.
type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

func (z *zlibCompressor) compress(dst, src []byte) ([]byte, error) {
	st, _ := z.pool.Get().(*zlibState)
	if st == nil {
		st = &zlibState{}
		w, err := zlib.NewWriterLevel(&st.out, z.level)
		if err != nil {
			return nil, fmt.Errorf("creating zlib writer: %w", err)
		}
		st.w = w
	}
	defer z.pool.Put(st)
	st.out.b = dst[:0]
	st.w.Reset(&st.out)
	if _, err := st.w.Write(src); err != nil {
		return nil, fmt.Errorf("compressing with zlib: %w", err)
	}
	if err := st.w.Close(); err != nil {
		return nil, fmt.Errorf("compressing with zlib: %w", err)
	}
	out := st.out.b
	st.out.b = nil
	return out, nil
}
func (z *zlibCompressor) id() uint16 { return compIDGzip }
func (z *zlibCompressor) close()     {}

// xzCompressor writes xz streams with CRC32 checks and a dictionary no
// larger than the block size: what the kernel's xz decoder accepts.
type xzCompressor struct{ dict int }

func (x *xzCompressor) compress(dst, src []byte) ([]byte, error) {
	buf := &sliceWriter{b: dst[:0]}
	w, err := xz.WriterConfig{DictCap: x.dict, CheckSum: xz.CRC32}.NewWriter(buf)
	if err != nil {
		return nil, fmt.Errorf("creating xz writer: %w", err)
	}
	if _, err := w.Write(src); err != nil {
		return nil, fmt.Errorf("compressing with xz: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compressing with xz: %w", err)
	}
	return buf.b, nil
}
func (x *xzCompressor) id() uint16 { return compIDXZ }
func (x *xzCompressor) close()     {}
