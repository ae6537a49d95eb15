// Package cpio reads and writes cpio archives in the SVR4 "newc" format
// (magic 070701, and 070702 on reading), the format the Linux kernel unpacks
// as an initramfs and CoreOS uses for rootfs.img and the Ignition embed area.
//
// The Writer writes exactly the header fields it is given (no inode
// numbering, no timestamps of its own), so the same entries always give the
// same bytes. The Reader never reads past the end of the archive's trailer
// entry, so a caller can go on reading what follows it in the same stream
// (for example zero padding and a further archive in a concatenated initrd).
package cpio

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// File type bits of Header.Mode (the S_IFMT part of st_mode).
const (
	ModeType    = 0o170000
	ModeSocket  = 0o140000
	ModeSymlink = 0o120000
	ModeRegular = 0o100000
	ModeBlock   = 0o060000
	ModeDir     = 0o040000
	ModeChar    = 0o020000
	ModeFIFO    = 0o010000
	ModePerm    = 0o007777
)

// HeaderSize is the size of the fixed part of a newc header.
const HeaderSize = 110

// Trailer is the name of the entry that ends an archive.
const Trailer = "TRAILER!!!"

const (
	magicNewc    = "070701"
	magicNewcCRC = "070702"
)

// Header is one archive entry. Mode carries the file type bits (ModeRegular,
// ModeDir, ...) and the permission bits. Size is the length of the entry's
// data: the file content, or the target of a symlink.
type Header struct {
	Name      string
	Mode      uint32
	UID       uint32
	GID       uint32
	NLink     uint32 // 0 is written as 1
	Mtime     uint32 // seconds since the Unix epoch
	Size      int64
	Ino       uint32
	DevMajor  uint32
	DevMinor  uint32
	RDevMajor uint32
	RDevMinor uint32
	Check     uint32 // checksum of 070702 archives; written as given
}

// IsDir reports whether the entry is a directory.
func (h *Header) IsDir() bool { return h.Mode&ModeType == ModeDir }

// IsRegular reports whether the entry is a regular file.
func (h *Header) IsRegular() bool { return h.Mode&ModeType == ModeRegular }

// HeaderLen is the number of bytes a header for an entry called name takes,
// name and padding included: the entry's data starts this many bytes after
// the start of its header. For "root.squashfs" it is 124.
func HeaderLen(name string) int64 {
	return align4(HeaderSize + int64(len(name)) + 1)
}

// EntryLen is the number of bytes an entry takes: header, name, data and
// padding.
func EntryLen(name string, size int64) int64 {
	return HeaderLen(name) + align4(size)
}

func align4(n int64) int64 { return (n + 3) &^ 3 }

var zeros [4]byte

// Marshal returns the header as an archive holds it: the fixed part, the
// name and the padding up to the entry's data (HeaderLen(h.Name) bytes). It
// is for callers that write an entry's data themselves, for example at a
// fixed offset, and patch the header (its Size) afterwards.
func (h *Header) Marshal() ([]byte, error) {
	if h.Name == "" {
		return nil, errors.New("writing cpio header: empty name")
	}
	if h.Size < 0 || h.Size > 0xffffffff {
		return nil, fmt.Errorf("writing cpio header for %s: size %d does not fit in newc's 32 bits", h.Name, h.Size)
	}
	nlink := h.NLink
	if nlink == 0 {
		nlink = 1
	}
	buf := make([]byte, 0, HeaderLen(h.Name))
	buf = append(buf, magicNewc...)
	for _, v := range []uint32{h.Ino, h.Mode, h.UID, h.GID, nlink, h.Mtime, uint32(h.Size),
		h.DevMajor, h.DevMinor, h.RDevMajor, h.RDevMinor, uint32(len(h.Name) + 1), h.Check} {
		buf = fmt.Appendf(buf, "%08x", v)
	}
	buf = append(buf, h.Name...)
	buf = append(buf, 0)
	for int64(len(buf))%4 != 0 {
		buf = append(buf, 0)
	}
	return buf, nil
}

// Writer writes a newc archive.
type Writer struct {
	w         io.Writer
	offset    int64 // bytes written so far
	remaining int64 // data bytes still expected for the current entry
	pad       int64 // padding due after the current entry's data
	closed    bool
}

// NewWriter returns a Writer writing an archive to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Offset is the number of bytes written so far. Before WriteHeader it is
// where the next header will start.
func (w *Writer) Offset() int64 { return w.offset }

// WriteHeader starts a new entry. The previous entry's data must have been
// written in full.
func (w *Writer) WriteHeader(h *Header) error {
	if w.closed {
		return errors.New("writing cpio header: archive closed")
	}
	if err := w.finishEntry(); err != nil {
		return err
	}
	buf, err := h.Marshal()
	if err != nil {
		return err
	}
	if err := w.write(buf); err != nil {
		return fmt.Errorf("writing cpio header for %s: %w", h.Name, err)
	}
	w.remaining = h.Size
	w.pad = align4(h.Size) - h.Size
	return nil
}

// Write writes data of the current entry; at most the header's Size bytes
// in total.
func (w *Writer) Write(p []byte) (int, error) {
	if int64(len(p)) > w.remaining {
		return 0, fmt.Errorf("writing cpio data: %d bytes more than the header's size", int64(len(p))-w.remaining)
	}
	n, err := w.w.Write(p)
	w.offset += int64(n)
	w.remaining -= int64(n)
	return n, err
}

// WriteEntry writes a header and then exactly h.Size bytes read from r
// (r may be nil when h.Size is 0).
func (w *Writer) WriteEntry(h *Header, r io.Reader) error {
	if err := w.WriteHeader(h); err != nil {
		return err
	}
	if h.Size == 0 {
		return nil
	}
	if r == nil {
		return fmt.Errorf("writing cpio data for %s: no reader for %d bytes", h.Name, h.Size)
	}
	n, err := io.Copy(w, io.LimitReader(r, h.Size))
	if err != nil {
		return fmt.Errorf("writing cpio data for %s: %w", h.Name, err)
	}
	if n != h.Size {
		return fmt.Errorf("writing cpio data for %s: got %d bytes, the header says %d", h.Name, n, h.Size)
	}
	return nil
}

// Close writes the trailer entry. It does not close the underlying writer
// and adds no block padding after the trailer.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	if err := w.WriteHeader(&Header{Name: Trailer}); err != nil {
		return err
	}
	w.closed = true
	return nil
}

func (w *Writer) finishEntry() error {
	if w.remaining != 0 {
		return fmt.Errorf("writing cpio archive: previous entry is %d bytes short", w.remaining)
	}
	if w.pad > 0 {
		if err := w.write(zeros[:w.pad]); err != nil {
			return fmt.Errorf("writing cpio padding: %w", err)
		}
		w.pad = 0
	}
	return nil
}

func (w *Writer) write(p []byte) error {
	n, err := w.w.Write(p)
	w.offset += int64(n)
	return err
}

// Reader reads a newc archive. Next returns io.EOF after the trailer entry;
// the underlying reader is then positioned just after the trailer's padding.
type Reader struct {
	r         io.Reader
	offset    int64
	remaining int64
	pad       int64
	done      bool
}

// NewReader returns a Reader reading an archive from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Offset is the number of bytes consumed from the underlying reader.
func (r *Reader) Offset() int64 { return r.offset }

// Next skips what is left of the current entry and reads the next header.
func (r *Reader) Next() (*Header, error) {
	if r.done {
		return nil, io.EOF
	}
	if err := r.skip(r.remaining + r.pad); err != nil {
		return nil, fmt.Errorf("skipping cpio entry data: %w", err)
	}
	r.remaining, r.pad = 0, 0
	start := r.offset
	var hdr [HeaderSize]byte
	if err := r.readFull(hdr[:]); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("reading cpio header at offset %d: archive ends without %s", start, Trailer)
		}
		return nil, fmt.Errorf("reading cpio header at offset %d: %w", start, err)
	}
	magic := string(hdr[:6])
	if magic != magicNewc && magic != magicNewcCRC {
		return nil, fmt.Errorf("reading cpio header at offset %d: bad magic %q (want %s or %s)", start, magic, magicNewc, magicNewcCRC)
	}
	var f [13]uint32
	for i := range f {
		field := string(hdr[6+8*i : 14+8*i])
		v, err := strconv.ParseUint(field, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("reading cpio header at offset %d: field %d is not hex: %q", start, i, field)
		}
		f[i] = uint32(v)
	}
	namesize := int64(f[11])
	if namesize < 1 || namesize > 4096 {
		return nil, fmt.Errorf("reading cpio header at offset %d: bad name size %d", start, namesize)
	}
	name := make([]byte, align4(HeaderSize+namesize)-HeaderSize)
	if err := r.readFull(name); err != nil {
		return nil, fmt.Errorf("reading cpio entry name at offset %d: %w", start, noEOF(err))
	}
	if name[namesize-1] != 0 {
		return nil, fmt.Errorf("reading cpio entry name at offset %d: name is not NUL-terminated", start)
	}
	h := &Header{
		Name: string(name[:namesize-1]), Ino: f[0], Mode: f[1], UID: f[2], GID: f[3], NLink: f[4],
		Mtime: f[5], Size: int64(f[6]), DevMajor: f[7], DevMinor: f[8], RDevMajor: f[9], RDevMinor: f[10],
		Check: f[12],
	}
	r.remaining = h.Size
	r.pad = align4(h.Size) - h.Size
	if h.Name == Trailer {
		// The trailer's data (normally none) and padding belong to the archive.
		if err := r.skip(r.remaining + r.pad); err != nil {
			return nil, fmt.Errorf("reading cpio trailer: %w", err)
		}
		r.remaining, r.pad, r.done = 0, 0, true
		return nil, io.EOF
	}
	return h, nil
}

// Read reads data of the current entry.
func (r *Reader) Read(p []byte) (int, error) {
	if r.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.remaining {
		p = p[:r.remaining]
	}
	n, err := r.r.Read(p)
	r.offset += int64(n)
	r.remaining -= int64(n)
	if err == io.EOF && r.remaining > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (r *Reader) readFull(p []byte) error {
	n, err := io.ReadFull(r.r, p)
	r.offset += int64(n)
	return err
}

func (r *Reader) skip(n int64) error {
	if n == 0 {
		return nil
	}
	c, err := io.CopyN(io.Discard, r.r, n)
	r.offset += c
	return noEOF(err)
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
