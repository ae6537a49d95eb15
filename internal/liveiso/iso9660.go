package liveiso

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// This is a small reader of the ISO9660 primary directory tree, written here
// rather than taken from github.com/kdomanski/iso9660 because the embed
// commands must find files exactly as coreos-installer does (src/iso9660.rs):
// by their 8.3 primary names, uppercased, ignoring Rock Ridge and Joliet.
// kdomanski replaces primary names with Rock Ridge names when present, so
// "COREOS/IGNINFO.JSO" would not be found on a real CoreOS ISO; it also
// hides a file's extent address, which is the one thing we need.

const sectorSize = 2048

// errNotFound marks a path that is not in the primary tree.
var errNotFound = errors.New("not found")

type isoFS struct {
	r          io.ReaderAt
	size       int64 // bytes in the image file
	volumeID   string
	systemID   string
	spaceSize  int64 // sectors, from the primary volume descriptor
	root       record
	bootRecord int64 // LBA of the El Torito boot catalog, or -1
}

// record is a directory record of the primary tree.
type record struct {
	name   string // primary name, ";1" and a trailing "." removed
	lba    uint32
	length uint32
	dir    bool
}

func (r record) offset() int64 { return int64(r.lba) * sectorSize }

func readISO(r io.ReaderAt, size int64) (*isoFS, error) {
	fs := &isoFS{r: r, size: size, bootRecord: -1}
	var havePrimary bool
	buf := make([]byte, sectorSize)
	for lba := int64(16); lba < 16+64; lba++ {
		if _, err := r.ReadAt(buf, lba*sectorSize); err != nil {
			return nil, fmt.Errorf("reading volume descriptor at sector %d: %w", lba, noEOF(err))
		}
		if string(buf[1:6]) != "CD001" || buf[6] != 1 {
			if lba == 16 {
				return nil, errors.New("not an ISO9660 image: no CD001 volume descriptor at sector 16")
			}
			return nil, fmt.Errorf("reading volume descriptor at sector %d: bad identifier %q", lba, buf[1:6])
		}
		switch buf[0] {
		case 255: // terminator
			if !havePrimary {
				return nil, errors.New("no primary volume descriptor in ISO image")
			}
			if fs.spaceSize*sectorSize > size {
				return nil, fmt.Errorf("ISO image is incomplete: the volume has %d bytes, the file %d", fs.spaceSize*sectorSize, size)
			}
			return fs, nil
		case 0: // boot record
			if strings.TrimRight(string(buf[7:39]), "\x00 ") == "EL TORITO SPECIFICATION" {
				fs.bootRecord = int64(binary.LittleEndian.Uint32(buf[71:75]))
			}
		case 1: // primary
			if havePrimary {
				continue
			}
			havePrimary = true
			fs.systemID = aString(buf[8:40])
			fs.volumeID = aString(buf[40:72])
			fs.spaceSize = int64(binary.LittleEndian.Uint32(buf[80:84]))
			recs, err := parseRecords(buf[156:190], true)
			if err != nil || len(recs) != 1 || !recs[0].dir {
				return nil, errors.New("parsing the root directory record of the primary volume descriptor")
			}
			fs.root = recs[0]
		}
	}
	return nil, errors.New("no volume descriptor set terminator in the first 64 descriptors")
}

// aString decodes a space-padded a-string, stopping at a NUL as
// coreos-installer does.
func aString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), " ")
}

// list returns the records of a directory, without "." and "..".
func (fs *isoFS) list(dir record) ([]record, error) {
	if !dir.dir {
		return nil, fmt.Errorf("%s is not a directory", dir.name)
	}
	if int64(dir.length) > 16<<20 {
		return nil, fmt.Errorf("directory %s is implausibly large (%d bytes)", dir.name, dir.length)
	}
	buf := make([]byte, dir.length)
	if _, err := fs.r.ReadAt(buf, dir.offset()); err != nil {
		return nil, fmt.Errorf("reading directory %s: %w", dir.name, noEOF(err))
	}
	recs, err := parseRecords(buf, false)
	if err != nil {
		return nil, fmt.Errorf("reading directory %s: %w", dir.name, err)
	}
	return recs, nil
}

func parseRecords(buf []byte, isRoot bool) ([]record, error) {
	var recs []record
	for pos := 0; pos < len(buf); {
		n := int(buf[pos])
		if n == 0 {
			// Records do not cross sectors: skip to the next one.
			pos = (pos + sectorSize) &^ (sectorSize - 1)
			continue
		}
		if n < 34 || pos+n > len(buf) {
			return nil, errors.New("incomplete directory record; corrupt ISO?")
		}
		rec := buf[pos : pos+n]
		pos += n
		nameLen := int(rec[32])
		if 33+nameLen > n {
			return nil, errors.New("directory record name exceeds the record; corrupt ISO?")
		}
		raw := rec[33 : 33+nameLen]
		r := record{
			lba:    binary.LittleEndian.Uint32(rec[2:6]),
			length: binary.LittleEndian.Uint32(rec[10:14]),
			dir:    rec[25]&2 != 0,
		}
		if nameLen == 1 && (raw[0] == 0 || raw[0] == 1) {
			if !isRoot {
				continue // "." or ".."
			}
			r.name = "."
		} else {
			r.name = fileName(raw)
		}
		if rec[25]&0x80 != 0 {
			return nil, fmt.Errorf("%s has several extents, which is not supported", r.name)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// fileName normalises a primary name as coreos-installer does: drop ";1" and
// a trailing ".", map ";" and "/" to ".", stop at NUL.
func fileName(raw []byte) string {
	s := string(raw)
	s = strings.TrimSuffix(s, ";1")
	s = strings.TrimSuffix(s, ".")
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return strings.NewReplacer(";", ".", "/", ".").Replace(s)
}

// lookup finds path (components separated by "/") in the primary tree. The
// comparison is exact: callers pass uppercase 8.3 names.
func (fs *isoFS) lookup(path string) (record, error) {
	cur := fs.root
	var walked []string
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if c == "" || c == "." {
			continue
		}
		recs, err := fs.list(cur)
		if err != nil {
			return record{}, err
		}
		found := false
		for _, r := range recs {
			if r.name == c {
				cur, found = r, true
				break
			}
		}
		if !found {
			return record{}, fmt.Errorf("%s: %w", path, errNotFound)
		}
		walked = append(walked, c)
		if !cur.dir && len(walked) < len(strings.Split(strings.Trim(path, "/"), "/")) {
			return record{}, fmt.Errorf("%s: %s is not a directory", path, strings.Join(walked, "/"))
		}
	}
	return cur, nil
}

// lookupFile is lookup for a regular file whose extent lies inside the image.
func (fs *isoFS) lookupFile(path string) (record, error) {
	r, err := fs.lookup(path)
	if err != nil {
		return record{}, err
	}
	if r.dir {
		return record{}, fmt.Errorf("%s is a directory", path)
	}
	if r.offset()+int64(r.length) > fs.size {
		return record{}, fmt.Errorf("%s extends beyond the end of the image", path)
	}
	return r, nil
}

func (fs *isoFS) readFile(r record, limit int64) ([]byte, error) {
	if int64(r.length) > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d expected", r.name, r.length, limit)
	}
	buf := make([]byte, r.length)
	if _, err := fs.r.ReadAt(buf, r.offset()); err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.name, noEOF(err))
	}
	return buf, nil
}

// walk calls fn for every file and directory of the primary tree, with its
// path ("EFI/FEDORA/GRUB.CFG"), depth first in directory order. Each
// directory extent is listed once, so a corrupt tree with loops ends.
func (fs *isoFS) walk(fn func(path string, r record) error) error {
	seen := map[uint32]bool{}
	var visit func(prefix string, dir record, depth int) error
	visit = func(prefix string, dir record, depth int) error {
		if depth > 64 {
			return errors.New("directory tree deeper than 64 levels; corrupt ISO?")
		}
		if seen[dir.lba] {
			return fmt.Errorf("directory %s is listed twice; corrupt ISO?", strings.TrimSuffix(prefix, "/"))
		}
		seen[dir.lba] = true
		recs, err := fs.list(dir)
		if err != nil {
			return err
		}
		for _, r := range recs {
			p := prefix + r.name
			if err := fn(p, r); err != nil {
				return err
			}
			if r.dir {
				if err := visit(p+"/", r, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return visit("", fs.root, 0)
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
