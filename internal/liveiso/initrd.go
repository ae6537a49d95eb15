package liveiso

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/okd-project/scos-builder/internal/cpio"
)

// IgnitionMember is the path of the Ignition config inside the embed area's
// archive; the live initramfs copies /config.ign to /usr/lib/ignition/user.ign.
const IgnitionMember = "config.ign"

// maxInitrdContent bounds the decompressed content of an embed area, so a
// small hostile area cannot exhaust memory.
const maxInitrdContent = 512 << 20

// Initrd is the content of an Ignition embed area: regular files by path.
// Directories and other entry types are not kept; Bytes recreates the parent
// directories, as coreos-installer does.
type Initrd struct {
	Members map[string][]byte
}

// Empty reports whether the initrd has no members (its area is all zeros).
func (i *Initrd) Empty() bool { return len(i.Members) == 0 }

// Paths returns the member paths, sorted.
func (i *Initrd) Paths() []string {
	p := make([]string, 0, len(i.Members))
	for k := range i.Members {
		p = append(p, k)
	}
	sort.Strings(p)
	return p
}

// ParseInitrd reads an embed area: a sequence of newc archives, each plain or
// compressed with gzip, xz or zstd, with zero padding between and after them.
// An all-zero area is an empty initrd. A later member with the same path
// replaces an earlier one, as when the kernel unpacks it.
func ParseInitrd(data []byte) (*Initrd, error) {
	in := &Initrd{Members: map[string][]byte{}}
	total := 0
	pos := skipZeros(data, 0)
	for pos < len(data) {
		rest := data[pos:]
		var consumed int
		var err error
		switch {
		case bytes.HasPrefix(rest, magicGzip):
			consumed, err = in.readGzip(rest, &total)
		case bytes.HasPrefix(rest, magicXz):
			consumed, err = in.readXz(rest, &total)
		case isZstdMagic(rest):
			consumed, err = in.readZstd(rest, &total)
		default:
			var r *cpio.Reader
			r, err = in.readArchive(bytes.NewReader(rest), &total)
			if r != nil {
				consumed = int(r.Offset())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("archive at offset %d: %w", pos, err)
		}
		pos = skipZeros(data, pos+consumed)
	}
	return in, nil
}

func skipZeros(b []byte, pos int) int {
	for pos < len(b) && b[pos] == 0 {
		pos++
	}
	return pos
}

// readArchive reads one newc archive from r, stopping after its trailer.
func (in *Initrd) readArchive(r io.Reader, total *int) (*cpio.Reader, error) {
	cr := cpio.NewReader(r)
	for {
		h, err := cr.Next()
		if err == io.EOF {
			return cr, nil
		}
		if err != nil {
			return cr, err
		}
		if !h.IsRegular() {
			continue
		}
		*total += int(h.Size)
		if *total > maxInitrdContent {
			return cr, fmt.Errorf("content larger than %d bytes", maxInitrdContent)
		}
		b := make([]byte, h.Size)
		if _, err := io.ReadFull(cr, b); err != nil {
			return cr, fmt.Errorf("reading %s: %w", h.Name, err)
		}
		in.Members[h.Name] = b
	}
}

// readCompressed reads one archive from a decompressor; what follows its
// trailer inside the compressed stream may only be zeros.
func (in *Initrd) readCompressed(r io.Reader, total *int) error {
	if _, err := in.readArchive(r, total); err != nil {
		return err
	}
	var buf [4096]byte
	for {
		n, err := r.Read(buf[:])
		for _, c := range buf[:n] {
			if c != 0 {
				return errors.New("found trailing garbage inside compressed archive")
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (in *Initrd) readGzip(b []byte, total *int) (int, error) {
	// bytes.Reader is an io.ByteReader, so the decompressor reads exactly
	// one gzip member and no further.
	br := bytes.NewReader(b)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return 0, fmt.Errorf("gzip: %w", err)
	}
	zr.Multistream(false)
	if err := in.readCompressed(zr, total); err != nil {
		return 0, fmt.Errorf("gzip: %w", err)
	}
	return len(b) - br.Len(), nil
}

func (in *Initrd) readXz(b []byte, total *int) (int, error) {
	n, err := xzStreamSize(b)
	if err != nil {
		return 0, fmt.Errorf("xz: %w", err)
	}
	zr, err := xz.ReaderConfig{SingleStream: true}.NewReader(bytes.NewReader(b[:n]))
	if err != nil {
		return 0, fmt.Errorf("xz: %w", err)
	}
	if err := in.readCompressed(zr, total); err != nil {
		return 0, fmt.Errorf("xz: %w", err)
	}
	return n, nil
}

// readZstd reads a run of zstd frames (skippable frames ignored), as the
// zstd decoder coreos-installer uses does.
func (in *Initrd) readZstd(b []byte, total *int) (int, error) {
	var frames [][]byte
	pos := 0
	for isZstdMagic(b[pos:]) {
		n, skippable, err := zstdFrameSize(b[pos:])
		if err != nil {
			return 0, fmt.Errorf("zstd: %w", err)
		}
		if !skippable {
			frames = append(frames, b[pos:pos+n])
		}
		pos += n
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxInitrdContent))
	if err != nil {
		return 0, fmt.Errorf("zstd: %w", err)
	}
	defer dec.Close()
	var out []byte
	for _, f := range frames {
		if out, err = dec.DecodeAll(f, out); err != nil {
			return 0, fmt.Errorf("zstd: %w", err)
		}
	}
	if err := in.readCompressed(bytes.NewReader(out), total); err != nil {
		return 0, fmt.Errorf("zstd: %w", err)
	}
	return pos, nil
}

// Bytes encodes the initrd as coreos-installer does: one newc archive with
// members sorted by path, each file's missing parent directories as 040755
// entries before it, files as 0100600, all owned by 0:0 with mtime 0; xz
// compressed with a CRC32 check (the kernel cannot verify CRC64). The same
// members always give the same bytes.
func (i *Initrd) Bytes() ([]byte, error) {
	var raw bytes.Buffer
	w := cpio.NewWriter(&raw)
	var cwd []string
	for _, path := range i.Paths() {
		if path == "" || strings.HasPrefix(path, "/") || strings.Contains(path, "\x00") {
			return nil, fmt.Errorf("invalid initrd member path %q", path)
		}
		parent := strings.Split(path, "/")
		parent = parent[:len(parent)-1]
		common := 0
		for common < len(cwd) && common < len(parent) && cwd[common] == parent[common] {
			common++
		}
		cwd = cwd[:common]
		for _, c := range parent[common:] {
			cwd = append(cwd, c)
			if err := w.WriteHeader(&cpio.Header{Name: strings.Join(cwd, "/"), Mode: cpio.ModeDir | 0o755}); err != nil {
				return nil, err
			}
		}
		data := i.Members[path]
		if err := w.WriteEntry(&cpio.Header{Name: path, Mode: cpio.ModeRegular | 0o600, Size: int64(len(data))}, bytes.NewReader(data)); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	// A dictionary larger than the input gains nothing; sizing it to the
	// input keeps compression fast and the decoder's allocation small.
	dict := 1 << bits.Len(uint(max(raw.Len(), 4096)-1))
	var out bytes.Buffer
	zw, err := xz.WriterConfig{CheckSum: xz.CRC32, DictCap: min(dict, 64<<20)}.NewWriter(&out)
	if err != nil {
		return nil, fmt.Errorf("creating xz compressor: %w", err)
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, fmt.Errorf("compressing initrd: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing initrd: %w", err)
	}
	return out.Bytes(), nil
}
