package liveiso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The Go decompressors for xz and zstd read ahead of the end of a stream, and
// an initrd is a sequence of streams with padding between them, so the end
// of each xz stream and zstd frame is found here by walking its structure
// (no decoding); each is then decompressed on its own.

var (
	magicGzip = []byte{0x1f, 0x8b}
	magicXz   = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
)

const (
	zstdMagic          = 0xfd2fb528
	zstdSkippableMask  = 0xfffffff0
	zstdSkippableStart = 0x184d2a50
)

func isZstdMagic(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	v := binary.LittleEndian.Uint32(b)
	return v == zstdMagic || v&zstdSkippableMask == zstdSkippableStart
}

var errTruncated = errors.New("compressed stream is truncated")

// xzStreamSize returns the length of the xz stream at the start of b,
// stream padding not included.
func xzStreamSize(b []byte) (int, error) {
	if len(b) < 12 || !bytes.HasPrefix(b, magicXz) {
		return 0, errors.New("not an xz stream")
	}
	checkSize := [16]int{0, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64}[b[7]&0x0f]
	pos := 12
	for {
		if pos >= len(b) {
			return 0, errTruncated
		}
		if b[pos] == 0 { // index indicator
			break
		}
		hsize := (int(b[pos]) + 1) * 4
		if pos+hsize > len(b) {
			return 0, errTruncated
		}
		flags := b[pos+1]
		var compressed int64 = -1
		if flags&0x40 != 0 {
			v, _, err := uvarint(b[pos+2 : pos+hsize])
			if err != nil {
				return 0, fmt.Errorf("xz block header: %w", err)
			}
			compressed = int64(v)
		}
		pos += hsize
		if compressed >= 0 {
			if compressed > int64(len(b)-pos) {
				return 0, errTruncated
			}
			pos += int(compressed)
		} else {
			n, err := lzma2Size(b[pos:])
			if err != nil {
				return 0, err
			}
			pos += n
		}
		pos = (pos + 3) &^ 3 // block padding; streams start 4-aligned here
		pos += checkSize
	}
	// Index: indicator, record count, records, padding, CRC32.
	p := pos + 1
	count, n, err := uvarint(b[min(p, len(b)):])
	if err != nil {
		return 0, fmt.Errorf("xz index: %w", err)
	}
	p += n
	for i := uint64(0); i < count; i++ {
		for j := 0; j < 2; j++ {
			_, n, err := uvarint(b[min(p, len(b)):])
			if err != nil {
				return 0, fmt.Errorf("xz index: %w", err)
			}
			p += n
		}
	}
	p = (p+3)&^3 + 4
	p += 12 // stream footer
	if p > len(b) {
		return 0, errTruncated
	}
	if string(b[p-2:p]) != "YZ" {
		return 0, errors.New("xz stream footer not found where the index says it ends")
	}
	return p, nil
}

// lzma2Size returns the length of the LZMA2 chunk sequence at the start of b,
// end marker included.
func lzma2Size(b []byte) (int, error) {
	pos := 0
	for {
		if pos >= len(b) {
			return 0, errTruncated
		}
		c := b[pos]
		switch {
		case c == 0:
			return pos + 1, nil
		case c == 1 || c == 2:
			if pos+3 > len(b) {
				return 0, errTruncated
			}
			pos += 3 + int(binary.BigEndian.Uint16(b[pos+1:])) + 1
		case c >= 0x80:
			hdr := 5
			if c >= 0xc0 {
				hdr = 6
			}
			if pos+hdr > len(b) {
				return 0, errTruncated
			}
			pos += hdr + int(binary.BigEndian.Uint16(b[pos+3:])) + 1
		default:
			return 0, fmt.Errorf("invalid LZMA2 control byte 0x%02x", c)
		}
	}
}

func uvarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 9; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errTruncated
}

// zstdFrameSize returns the length of the zstd frame (or skippable frame) at
// the start of b, and whether it is a skippable frame.
func zstdFrameSize(b []byte) (int, bool, error) {
	if len(b) < 8 {
		return 0, false, errTruncated
	}
	magic := binary.LittleEndian.Uint32(b)
	if magic&zstdSkippableMask == zstdSkippableStart {
		n := 8 + int64(binary.LittleEndian.Uint32(b[4:]))
		if n > int64(len(b)) {
			return 0, true, errTruncated
		}
		return int(n), true, nil
	}
	if magic != zstdMagic {
		return 0, false, errors.New("not a zstd frame")
	}
	fhd := b[4]
	single := fhd&0x20 != 0
	pos := 5
	if !single {
		pos++ // window descriptor
	}
	pos += [4]int{0, 1, 2, 4}[fhd&3] // dictionary ID
	fcs := [4]int{0, 2, 4, 8}[fhd>>6]
	if fhd>>6 == 0 && single {
		fcs = 1
	}
	pos += fcs
	for {
		if pos+3 > len(b) {
			return 0, false, errTruncated
		}
		h := uint32(b[pos]) | uint32(b[pos+1])<<8 | uint32(b[pos+2])<<16
		last, typ, size := h&1 != 0, (h>>1)&3, int(h>>3)
		pos += 3
		switch typ {
		case 0, 2: // raw, compressed
			pos += size
		case 1: // RLE
			pos++
		default:
			return 0, false, errors.New("reserved zstd block type")
		}
		if pos > len(b) {
			return 0, false, errTruncated
		}
		if last {
			break
		}
	}
	if fhd&4 != 0 {
		pos += 4 // content checksum
	}
	if pos > len(b) {
		return 0, false, errTruncated
	}
	return pos, false, nil
}
