package squashfs

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"path"
	"strings"

	"github.com/okd-project/scos-builder/internal/fstree"
	"golang.org/x/sys/unix"
)

const (
	magic          = 0x73717368
	superblockSize = 96
	invalidTable   = -1 // all ones on disk
	invalidXattr   = 0xffffffff
	maxNameLen     = 256
	maxSymlinkLen  = 65535
	maxIDs         = 65536

	flagAlwaysFragments = 1 << 5
	flagDuplicates      = 1 << 6
	flagExportable      = 1 << 7
	flagNoXattrs        = 1 << 9
)

// Inode types (squashfs_fs.h); the extended form of each is basic + 7.
const (
	typeDir     = 1
	typeFile    = 2
	typeSymlink = 3
	typeBlkDev  = 4
	typeChrDev  = 5
	typeFifo    = 6
	typeSocket  = 7
	extOffset   = 7
)

// node is the writer's state for one inode.
type node struct {
	ino     *fstree.Inode
	num     uint32   // inode number, 1-based
	nlink   uint32   // st_nlink
	names   []string // a directory's sorted entry names
	ref     uint64   // inode reference once written
	written bool
}

type builder struct {
	opts  Options
	comp  compressor
	out   *sink
	nodes map[*fstree.Inode]*node
	count uint32 // inodes numbered so far
	files []regularFile

	data      map[*fstree.Inode]*fileData
	fragments []fragmentEntry

	inodes, dirs *metaWriter
	ids          []uint32
	idIndex      map[uint32]uint16
	idErr        error

	xattrs      *metaWriter
	xattrIDs    []byte
	xattrSets   map[string]uint32
	xattrValues map[string]uint64

	exportRefs []uint64 // by inode number - 1
	scratch    []byte
}

func newBuilder(opts Options, w io.WriterAt, base int64) (*builder, error) {
	c, err := newCompressor(opts.Compression, opts.Level, opts.BlockSize, opts.Workers)
	if err != nil {
		return nil, err
	}
	return &builder{
		opts:        opts,
		comp:        c,
		out:         newSink(w, base, superblockSize),
		nodes:       map[*fstree.Inode]*node{},
		inodes:      newMetaWriter(c),
		dirs:        newMetaWriter(c),
		xattrs:      newMetaWriter(c),
		idIndex:     map[uint32]uint16{},
		xattrSets:   map[string]uint32{},
		xattrValues: map[string]uint64{},
	}, nil
}

func (b *builder) build(ctx context.Context, t *fstree.Tree) (int64, error) {
	root := &node{ino: t.Root, nlink: 2}
	b.nodes[t.Root] = root
	if err := b.scan(root, ""); err != nil {
		return 0, err
	}
	b.count++
	root.num = b.count

	data, err := b.writeData(ctx, b.files)
	if err != nil {
		return 0, err
	}
	b.data = data
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	b.exportRefs = make([]uint64, b.count)
	rootRef, err := b.writeDir(root, "", b.count+1)
	if err != nil {
		return 0, err
	}
	if b.idErr != nil {
		return 0, b.idErr
	}
	inodeTable, err := b.inodes.finish()
	if err != nil {
		return 0, err
	}
	dirTable, err := b.dirs.finish()
	if err != nil {
		return 0, err
	}

	sb := superblock{
		inodes:    b.count,
		mkfsTime:  uint32(b.opts.MkfsTime),
		blockSize: uint32(b.opts.BlockSize),
		fragments: uint32(len(b.fragments)),
		comp:      b.comp.id(),
		blockLog:  uint16(bits.TrailingZeros(uint(b.opts.BlockSize))),
		flags:     flagDuplicates,
		rootInode: rootRef,
	}
	if !b.opts.NoTailPacking {
		sb.flags |= flagAlwaysFragments
	}

	sb.inodeTable = b.out.pos
	b.out.write(inodeTable)
	sb.dirTable = b.out.pos
	b.out.write(dirTable)

	frags := make([]byte, 0, 16*len(b.fragments))
	for _, f := range b.fragments {
		frags = binary.LittleEndian.AppendUint64(frags, uint64(f.start))
		frags = binary.LittleEndian.AppendUint32(frags, f.size)
		frags = binary.LittleEndian.AppendUint32(frags, 0)
	}
	if sb.fragmentTable, err = b.writeTable(frags); err != nil {
		return 0, err
	}

	sb.lookupTable = invalidTable
	if !b.opts.NoExportTable {
		sb.flags |= flagExportable
		refs := make([]byte, 0, 8*len(b.exportRefs))
		for _, r := range b.exportRefs {
			refs = binary.LittleEndian.AppendUint64(refs, r)
		}
		if sb.lookupTable, err = b.writeTable(refs); err != nil {
			return 0, err
		}
	}

	ids := make([]byte, 0, 4*len(b.ids))
	for _, id := range b.ids {
		ids = binary.LittleEndian.AppendUint32(ids, id)
	}
	sb.noIDs = uint16(len(b.ids))
	if sb.idTable, err = b.writeTable(ids); err != nil {
		return 0, err
	}

	sb.xattrTable = invalidTable
	if len(b.xattrIDs) == 0 {
		sb.flags |= flagNoXattrs
	} else {
		kv, err := b.xattrs.finish()
		if err != nil {
			return 0, err
		}
		kvStart := b.out.pos
		b.out.write(kv)
		idTable, indexPos, err := table(b.comp, b.xattrIDs, b.out.pos)
		if err != nil {
			return 0, err
		}
		// The id blocks, then a header (kv start, id count, unused),
		// then the index of the id blocks.
		split := indexPos - b.out.pos
		b.out.write(idTable[:split])
		sb.xattrTable = b.out.pos
		var hdr [16]byte
		binary.LittleEndian.PutUint64(hdr[0:], uint64(kvStart))
		binary.LittleEndian.PutUint32(hdr[8:], uint32(len(b.xattrIDs)/16))
		b.out.write(hdr[:])
		b.out.write(idTable[split:])
	}

	sb.bytesUsed = b.out.pos
	if pad := (padding - b.out.pos%padding) % padding; pad > 0 {
		b.out.write(make([]byte, pad))
	}
	total := b.out.pos
	if err := b.out.close(); err != nil {
		return 0, err
	}
	if _, err := b.out.w.WriteAt(sb.marshal(), b.out.base); err != nil {
		return 0, fmt.Errorf("writing superblock: %w", err)
	}
	return total, nil
}

// writeTable writes a fixed-size-entry table and returns its index position.
func (b *builder) writeTable(entries []byte) (int64, error) {
	if len(entries) == 0 {
		return b.out.pos, nil
	}
	out, indexPos, err := table(b.comp, entries, b.out.pos)
	if err != nil {
		return 0, err
	}
	b.out.write(out)
	return indexPos, nil
}

// scan validates the tree, counts links, collects regular files in walk
// order and numbers inodes: a directory's non-directory entries in name
// order, each directory after everything below it, the root last.
func (b *builder) scan(dir *node, p string) error {
	dir.names = dir.ino.SortedNames()
	for _, name := range dir.names {
		child := dir.ino.Entries[name]
		cp := path.Join("/", p, name)
		if err := checkName(name); err != nil {
			return fmt.Errorf("%s: %w", cp, err)
		}
		if child == nil {
			return fmt.Errorf("%s: nil inode", cp)
		}
		if n, ok := b.nodes[child]; ok {
			if child.Kind == fstree.KindDir {
				return fmt.Errorf("%s: directory hardlinks are not allowed", cp)
			}
			n.nlink++
			continue
		}
		n := &node{ino: child, nlink: 1}
		b.nodes[child] = n
		switch child.Kind {
		case fstree.KindDir:
			dir.nlink++
			n.nlink = 2
			if err := b.scan(n, path.Join(p, name)); err != nil {
				return err
			}
		case fstree.KindRegular:
			b.files = append(b.files, regularFile{path: cp, ino: child})
		case fstree.KindSymlink:
			if len(child.Target) > maxSymlinkLen {
				return fmt.Errorf("%s: symlink target longer than %d bytes", cp, maxSymlinkLen)
			}
		case fstree.KindCharDev, fstree.KindBlockDev:
			if _, err := encodeDev(child.Rdev); err != nil {
				return fmt.Errorf("%s: %w", cp, err)
			}
		case fstree.KindFifo, fstree.KindSocket:
		default:
			return fmt.Errorf("%s: unknown kind %s", cp, child.Kind)
		}
		if child.Mtime < 0 || child.Mtime > 0xffffffff {
			return fmt.Errorf("%s: mtime %d does not fit the squashfs 32-bit timestamp", cp, child.Mtime)
		}
		if child.Kind != fstree.KindDir {
			b.count++
			n.num = b.count
		}
	}
	if p != "" {
		b.count++
		dir.num = b.count
	}
	return nil
}

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("invalid entry name %q", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("entry name %q contains '/' or NUL", name)
	case len(name) > maxNameLen:
		return fmt.Errorf("entry name longer than %d bytes", maxNameLen)
	}
	return nil
}

// encodeDev packs a device number the way the kernel's new_encode_dev does.
func encodeDev(rdev uint64) (uint32, error) {
	major, minor := unix.Major(rdev), unix.Minor(rdev)
	if major > 0xfff || minor > 0xfffff {
		return 0, fmt.Errorf("device number %d:%d does not fit 32 bits", major, minor)
	}
	return minor&0xff | major<<8 | (minor&^0xff)<<12, nil
}

type superblock struct {
	inodes, mkfsTime, blockSize, fragments uint32
	comp, blockLog, flags, noIDs           uint16
	rootInode                              uint64
	bytesUsed, idTable, xattrTable         int64
	inodeTable, dirTable, fragmentTable    int64
	lookupTable                            int64
}

func (s superblock) marshal() []byte {
	b := make([]byte, 0, superblockSize)
	le := binary.LittleEndian
	b = le.AppendUint32(b, magic)
	b = le.AppendUint32(b, s.inodes)
	b = le.AppendUint32(b, s.mkfsTime)
	b = le.AppendUint32(b, s.blockSize)
	b = le.AppendUint32(b, s.fragments)
	b = le.AppendUint16(b, s.comp)
	b = le.AppendUint16(b, s.blockLog)
	b = le.AppendUint16(b, s.flags)
	b = le.AppendUint16(b, s.noIDs)
	b = le.AppendUint16(b, 4)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint64(b, s.rootInode)
	for _, v := range []int64{s.bytesUsed, s.idTable, s.xattrTable, s.inodeTable, s.dirTable, s.fragmentTable, s.lookupTable} {
		b = le.AppendUint64(b, uint64(v))
	}
	return b
}
