package initrd

import (
	"fmt"
	"io"
)

// A minimal newc (SVR4 "070701", no CRC) writer. Every header field is 8
// hex digits; names and data are NUL-padded to 4 bytes.

const (
	newcHeaderSize = 110
	newcTrailer    = "TRAILER!!!"
	modeDir        = 0o040000
	modeRegular    = 0o100000
	// sizeFieldOffset is where c_filesize sits in a header.
	sizeFieldOffset = 6 + 6*8
	maxNewcSize     = 0xffffffff
)

type newcEntry struct {
	name  string
	ino   uint32
	mode  uint32
	nlink uint32
	mtime int64
	size  int64
}

// header returns the header and the padded name of e.
func (e newcEntry) header() []byte {
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		e.ino, e.mode, 0, 0, e.nlink, uint32(e.mtime), uint32(e.size), 0, 0, 0, 0, len(e.name)+1, 0)
	b := append([]byte(h), e.name...)
	b = append(b, 0)
	return append(b, make([]byte, pad4(len(b)))...)
}

func pad4(n int) int { return (4 - n%4) % 4 }

// newcWriter writes entries sequentially and counts bytes.
type newcWriter struct {
	w   io.Writer
	n   int64
	ino uint32
}

func (c *newcWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

// dir writes a directory entry.
func (c *newcWriter) dir(name string, mtime int64) error {
	c.ino++
	return c.write(newcEntry{name: name, ino: c.ino, mode: modeDir | 0o755, nlink: 2, mtime: mtime}.header())
}

// file writes a regular file with its data.
func (c *newcWriter) file(name string, data []byte, mtime int64) error {
	c.ino++
	e := newcEntry{name: name, ino: c.ino, mode: modeRegular | 0o644, nlink: 1, mtime: mtime, size: int64(len(data))}
	if err := c.write(e.header()); err != nil {
		return err
	}
	if err := c.write(data); err != nil {
		return err
	}
	return c.write(make([]byte, pad4(len(data))))
}

// trailer ends the archive.
func (c *newcWriter) trailer() error {
	return c.write(newcEntry{name: newcTrailer, nlink: 1}.header())
}
