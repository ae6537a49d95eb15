package squashfs

import (
	"encoding/binary"
	"fmt"
)

// metadataSize is the uncompressed size of a metadata block.
const metadataSize = 8192

const (
	metaUncompressed  = 1 << 15
	blockUncompressed = 1 << 24
)

// metaWriter packs a metadata stream (inode, directory, xattr tables) into
// 8 KiB blocks, each compressed as soon as it is full so that references
// (compressed block start << 16 | offset) are known while writing.
type metaWriter struct {
	comp    compressor
	out     []byte // finished blocks with their 2-byte headers
	cur     []byte // the block being filled, < metadataSize bytes
	scratch []byte
	err     error
}

func newMetaWriter(c compressor) *metaWriter {
	return &metaWriter{comp: c, cur: make([]byte, 0, metadataSize)}
}

// ref returns the reference of the next byte written.
func (m *metaWriter) ref() uint64 {
	return uint64(len(m.out))<<16 | uint64(len(m.cur))
}

func (m *metaWriter) write(b []byte) {
	for len(b) > 0 {
		n := copy(m.cur[len(m.cur):metadataSize], b)
		m.cur = m.cur[:len(m.cur)+n]
		b = b[n:]
		if len(m.cur) == metadataSize {
			m.flush()
		}
	}
}

func (m *metaWriter) flush() {
	if len(m.cur) == 0 {
		return
	}
	c, err := m.comp.compress(m.scratch, m.cur)
	if err != nil && m.err == nil {
		m.err = err
	}
	m.scratch = c
	if err == nil && len(c) < len(m.cur) {
		m.out = binary.LittleEndian.AppendUint16(m.out, uint16(len(c)))
		m.out = append(m.out, c...)
	} else {
		m.out = binary.LittleEndian.AppendUint16(m.out, uint16(len(m.cur))|metaUncompressed)
		m.out = append(m.out, m.cur...)
	}
	m.cur = m.cur[:0]
}

// finish flushes the last partial block and returns the stream.
func (m *metaWriter) finish() ([]byte, error) {
	m.flush()
	if m.err != nil {
		return nil, fmt.Errorf("compressing metadata: %w", m.err)
	}
	return m.out, nil
}

// table packs fixed-size entries (fragment, export, id, xattr id tables)
// into metadata blocks written at pos, followed by the index of the blocks'
// absolute positions. It returns the bytes to write and the index position.
func table(c compressor, entries []byte, pos int64) ([]byte, int64, error) {
	m := newMetaWriter(c)
	var starts []int64
	for off := 0; off < len(entries); off += metadataSize {
		starts = append(starts, pos+int64(len(m.out)))
		end := min(off+metadataSize, len(entries))
		m.write(entries[off:end])
	}
	out, err := m.finish()
	if err != nil {
		return nil, 0, err
	}
	indexPos := pos + int64(len(out))
	for _, s := range starts {
		out = binary.LittleEndian.AppendUint64(out, uint64(s))
	}
	return out, indexPos, nil
}
