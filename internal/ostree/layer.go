package ostree

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Layer is one layer of the container image, in manifest order.
type Layer struct {
	// Digest is the blob digest ("sha256:…"), used in refs and messages.
	Digest string
	// DiffID is the digest of the uncompressed tar ("sha256:…"). When
	// empty, the config's rootfs.diff_ids entry is used. It is verified
	// after the layer has been read.
	DiffID string
	// Open returns the blob: an uncompressed, gzip or zstd tar (detected
	// by magic bytes).
	Open func() (io.ReadCloser, error)
}

func (l Layer) name() string {
	if l.Digest != "" {
		return l.Digest
	}
	return l.DiffID
}

// layerReader is an open layer: a tar reader over the decompressed
// stream, hashing it for the diffid check.
type layerReader struct {
	*tar.Reader
	closers []io.Closer
	raw     io.Reader
	h       hash.Hash
}

func openLayer(l Layer) (*layerReader, error) {
	if l.Open == nil {
		return nil, fmt.Errorf("layer %s has no opener", l.name())
	}
	rc, err := l.Open()
	if err != nil {
		return nil, fmt.Errorf("opening layer %s: %w", l.name(), err)
	}
	lr := &layerReader{closers: []io.Closer{rc}, h: sha256.New()}
	br := bufio.NewReaderSize(rc, 1<<20)
	magic, _ := br.Peek(4)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("opening layer %s: reading gzip header: %w", l.name(), err)
		}
		lr.closers = append(lr.closers, gz)
		r = gz
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("opening layer %s: reading zstd header: %w", l.name(), err)
		}
		lr.closers = append(lr.closers, closerFunc(func() error { zr.Close(); return nil }))
		r = zr
	}
	lr.raw = io.TeeReader(r, lr.h)
	lr.Reader = tar.NewReader(lr.raw)
	return lr, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// finish drains the stream after the tar end marker and checks the diffid.
func (lr *layerReader) finish(l Layer, diffID string) error {
	if _, err := io.Copy(io.Discard, lr.raw); err != nil {
		return fmt.Errorf("reading layer %s: %w", l.name(), err)
	}
	if diffID == "" {
		return nil
	}
	got := "sha256:" + hex.EncodeToString(lr.h.Sum(nil))
	if got != diffID {
		return fmt.Errorf("layer %s: uncompressed digest is %s, want diffid %s", l.name(), got, diffID)
	}
	return nil
}

func (lr *layerReader) Close() error {
	var first error
	for i := len(lr.closers) - 1; i >= 0; i-- {
		if err := lr.closers[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
