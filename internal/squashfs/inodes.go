package squashfs

import (
	"encoding/binary"
	"fmt"
	"path"
	"strings"

	"github.com/okd-project/scos-builder/internal/fstree"
)

var le = binary.LittleEndian

// dirEntry is one entry of a directory listing.
type dirEntry struct {
	name string
	ref  uint64
	num  uint32
	typ  uint16
}

// dirIndex marks where a directory header starts in a large listing, so
// lookups can skip to the right metadata block.
type dirIndex struct {
	pos  int // offset in the listing
	name string
}

// writeDir writes the inodes below dir (post-order), dir's listing and
// dir's inode, and returns its reference.
func (b *builder) writeDir(dir *node, p string, parent uint32) (uint64, error) {
	entries := make([]dirEntry, 0, len(dir.names))
	for _, name := range dir.names {
		child := dir.ino.Entries[name]
		cn := b.nodes[child]
		if child.Kind == fstree.KindDir {
			if _, err := b.writeDir(cn, path.Join(p, name), dir.num); err != nil {
				return 0, err
			}
		} else if !cn.written {
			if err := b.writeInode(cn, path.Join("/", p, name)); err != nil {
				return 0, err
			}
		}
		entries = append(entries, dirEntry{name: name, ref: cn.ref, num: cn.num, typ: basicType(child.Kind)})
	}
	listing, index := dirListing(entries)

	startRef := b.dirs.ref()
	type placed struct {
		index, block uint32
		name         string
	}
	var idx []placed
	written := 0
	for _, ix := range index {
		b.dirs.write(listing[written:ix.pos])
		written = ix.pos
		idx = append(idx, placed{index: uint32(ix.pos), block: uint32(b.dirs.ref() >> 16), name: ix.name})
	}
	b.dirs.write(listing[written:])
	dirBlock := startRef >> 16
	dirOffset := uint16(startRef & 0xffff)
	if dirBlock > 0xffffffff {
		return 0, fmt.Errorf("directory table larger than 4 GiB")
	}

	xattr, err := b.xattrIndex(dir.ino, "/"+p)
	if err != nil {
		return 0, err
	}
	fileSize := len(listing) + 3
	h := b.header(dir, typeDir)
	if len(idx) > 0 || xattr != invalidXattr || fileSize > 0xffff {
		h = b.header(dir, typeDir+extOffset)
		h = le.AppendUint32(h, dir.nlink)
		h = le.AppendUint32(h, uint32(fileSize))
		h = le.AppendUint32(h, uint32(dirBlock))
		h = le.AppendUint32(h, parent)
		h = le.AppendUint16(h, uint16(len(idx)))
		h = le.AppendUint16(h, dirOffset)
		h = le.AppendUint32(h, xattr)
		for _, ix := range idx {
			h = le.AppendUint32(h, ix.index)
			h = le.AppendUint32(h, ix.block)
			h = le.AppendUint32(h, uint32(len(ix.name)-1))
			h = append(h, ix.name...)
		}
	} else {
		h = le.AppendUint32(h, uint32(dirBlock))
		h = le.AppendUint32(h, dir.nlink)
		h = le.AppendUint16(h, uint16(fileSize))
		h = le.AppendUint16(h, dirOffset)
		h = le.AppendUint32(h, parent)
	}
	b.emitInode(dir, h)
	return dir.ref, nil
}

// dirListing encodes entries as directory headers and entries. A new header
// starts every 256 entries, when the inodes' metadata block changes, when
// the inode number delta leaves int16, and after 8 KiB of listing (then an
// index entry is recorded for it), as mksquashfs does.
func dirListing(entries []dirEntry) ([]byte, []dirIndex) {
	var buf []byte
	var index []dirIndex
	hdrPos, count := -1, 0
	var hdrBlock, hdrNum uint32
	lastIndex := 0
	for _, e := range entries {
		block := uint32(e.ref >> 16)
		delta := int64(e.num) - int64(hdrNum)
		entrySize := 8 + len(e.name)
		crossed := hdrPos >= 0 && len(buf)+entrySize-lastIndex > metadataSize
		if hdrPos < 0 || count == 256 || block != hdrBlock || delta > 32767 || delta < -32768 || crossed {
			if hdrPos >= 0 {
				le.PutUint32(buf[hdrPos:], uint32(count-1))
			}
			if crossed {
				index = append(index, dirIndex{pos: len(buf), name: e.name})
				lastIndex = len(buf)
			}
			hdrPos, count, hdrBlock, hdrNum = len(buf), 0, block, e.num
			buf = le.AppendUint32(buf, 0)
			buf = le.AppendUint32(buf, block)
			buf = le.AppendUint32(buf, e.num)
			delta = 0
		}
		buf = le.AppendUint16(buf, uint16(e.ref&0xffff))
		buf = le.AppendUint16(buf, uint16(int16(delta)))
		buf = le.AppendUint16(buf, e.typ)
		buf = le.AppendUint16(buf, uint16(len(e.name)-1))
		buf = append(buf, e.name...)
		count++
	}
	if hdrPos >= 0 {
		le.PutUint32(buf[hdrPos:], uint32(count-1))
	}
	return buf, index
}

func basicType(k fstree.Kind) uint16 {
	switch k {
	case fstree.KindDir:
		return typeDir
	case fstree.KindRegular:
		return typeFile
	case fstree.KindSymlink:
		return typeSymlink
	case fstree.KindBlockDev:
		return typeBlkDev
	case fstree.KindCharDev:
		return typeChrDev
	case fstree.KindFifo:
		return typeFifo
	}
	return typeSocket
}

// header starts an inode: type, mode, uid and gid indexes, mtime, number.
func (b *builder) header(n *node, typ uint16) []byte {
	h := b.scratch[:0]
	h = le.AppendUint16(h, typ)
	h = le.AppendUint16(h, uint16(n.ino.Mode&0o7777))
	h = le.AppendUint16(h, b.id(n.ino.UID))
	h = le.AppendUint16(h, b.id(n.ino.GID))
	h = le.AppendUint32(h, uint32(n.ino.Mtime))
	h = le.AppendUint32(h, n.num)
	return h
}

func (b *builder) emitInode(n *node, h []byte) {
	n.ref = b.inodes.ref()
	n.written = true
	b.exportRefs[n.num-1] = n.ref
	b.inodes.write(h)
	b.scratch = h[:0]
}

// id returns the index of a uid or gid in the id table.
func (b *builder) id(v uint32) uint16 {
	if i, ok := b.idIndex[v]; ok {
		return i
	}
	if len(b.ids) == maxIDs {
		b.idErr = fmt.Errorf("more than %d distinct uids and gids", maxIDs)
		return 0
	}
	i := uint16(len(b.ids))
	b.idIndex[v] = i
	b.ids = append(b.ids, v)
	return i
}

func (b *builder) writeInode(n *node, p string) error {
	ino := n.ino
	xattr, err := b.xattrIndex(ino, p)
	if err != nil {
		return err
	}
	ext := xattr != invalidXattr
	var h []byte
	switch ino.Kind {
	case fstree.KindRegular:
		fd := b.data[ino]
		sparse := fd.sparse
		if sparse >= fd.size && fd.size > 0 {
			sparse = fd.size - 1
		}
		if ext || n.nlink > 1 || fd.size > 0xffffffff || fd.start > 0xffffffff || sparse > 0 {
			h = b.header(n, typeFile+extOffset)
			h = le.AppendUint64(h, uint64(fd.start))
			h = le.AppendUint64(h, uint64(fd.size))
			h = le.AppendUint64(h, uint64(sparse))
			h = le.AppendUint32(h, n.nlink)
			h = le.AppendUint32(h, fd.fragIndex)
			h = le.AppendUint32(h, fd.fragOffset)
			h = le.AppendUint32(h, xattr)
		} else {
			h = b.header(n, typeFile)
			h = le.AppendUint32(h, uint32(fd.start))
			h = le.AppendUint32(h, fd.fragIndex)
			h = le.AppendUint32(h, fd.fragOffset)
			h = le.AppendUint32(h, uint32(fd.size))
		}
		for _, s := range fd.blocks {
			h = le.AppendUint32(h, s)
		}
	case fstree.KindSymlink:
		h = b.header(n, typeSymlink+extIf(ext))
		h = le.AppendUint32(h, n.nlink)
		h = le.AppendUint32(h, uint32(len(ino.Target)))
		h = append(h, ino.Target...)
		if ext {
			h = le.AppendUint32(h, xattr)
		}
	case fstree.KindBlockDev, fstree.KindCharDev:
		rdev, err := encodeDev(ino.Rdev)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		h = b.header(n, basicType(ino.Kind)+extIf(ext))
		h = le.AppendUint32(h, n.nlink)
		h = le.AppendUint32(h, rdev)
		if ext {
			h = le.AppendUint32(h, xattr)
		}
	case fstree.KindFifo, fstree.KindSocket:
		h = b.header(n, basicType(ino.Kind)+extIf(ext))
		h = le.AppendUint32(h, n.nlink)
		if ext {
			h = le.AppendUint32(h, xattr)
		}
	default:
		return fmt.Errorf("%s: unknown kind %s", p, ino.Kind)
	}
	b.emitInode(n, h)
	return nil
}

func extIf(ext bool) uint16 {
	if ext {
		return extOffset
	}
	return 0
}

const xattrValueOOL = 0x100

var xattrPrefixes = []struct {
	prefix string
	typ    uint16
}{{"user.", 0}, {"trusted.", 1}, {"security.", 2}}

// xattrIndex returns the xattr id of ino's attribute set, writing the set
// the first time it is seen. Values of 8 bytes or more that were already
// written by another set are stored as references to the first copy.
func (b *builder) xattrIndex(ino *fstree.Inode, p string) (uint32, error) {
	if len(ino.Xattrs) == 0 {
		return invalidXattr, nil
	}
	var key strings.Builder
	for _, x := range ino.Xattrs {
		fmt.Fprintf(&key, "%d:%s%d:", len(x.Name), x.Name, len(x.Value))
		key.Write(x.Value)
	}
	if i, ok := b.xattrSets[key.String()]; ok {
		return i, nil
	}
	ref := b.xattrs.ref()
	size := 0
	for _, x := range ino.Xattrs {
		typ, suffix, ok := uint16(0), "", false
		for _, pr := range xattrPrefixes {
			if s, found := strings.CutPrefix(x.Name, pr.prefix); found && s != "" {
				typ, suffix, ok = pr.typ, s, true
				break
			}
		}
		if !ok {
			return 0, fmt.Errorf("%s: extended attribute %q: squashfs stores only the user., trusted. and security. namespaces", p, x.Name)
		}
		if len(suffix) > 0xffff {
			return 0, fmt.Errorf("%s: extended attribute name %q too long", p, x.Name)
		}
		if uint64(len(x.Value)) > 0xffffffff {
			return 0, fmt.Errorf("%s: extended attribute %q value too large", p, x.Name)
		}
		size += len(x.Name) + 1 + len(x.Value)
		first, seen := b.xattrValues[string(x.Value)]
		if seen {
			typ |= xattrValueOOL
		}
		var h []byte
		h = le.AppendUint16(h, typ)
		h = le.AppendUint16(h, uint16(len(suffix)))
		h = append(h, suffix...)
		b.xattrs.write(h)
		if seen {
			var v [12]byte
			le.PutUint32(v[0:], 8)
			le.PutUint64(v[4:], first)
			b.xattrs.write(v[:])
			continue
		}
		if len(x.Value) >= 8 {
			b.xattrValues[string(x.Value)] = b.xattrs.ref()
		}
		var v [4]byte
		le.PutUint32(v[:], uint32(len(x.Value)))
		b.xattrs.write(v[:])
		b.xattrs.write(x.Value)
	}
	i := uint32(len(b.xattrIDs) / 16)
	b.xattrIDs = le.AppendUint64(b.xattrIDs, ref)
	b.xattrIDs = le.AppendUint32(b.xattrIDs, uint32(len(ino.Xattrs)))
	b.xattrIDs = le.AppendUint32(b.xattrIDs, uint32(size))
	b.xattrSets[key.String()] = i
	return i, nil
}
