// Package fstree is the virtual filesystem tree the build passes between
// stages: file metadata (type, mode, owner, xattrs, symlink target, device
// numbers, hardlink identity) is kept in memory, file contents live in a
// content store on disk, owned by whoever runs the build. Nothing needs root
// until Materialize writes the tree out with real owners and xattrs.
//
// Several directory entries may point at the same *Inode: that is a
// hardlink. Walks are sorted by name, so everything derived from a tree is
// deterministic.
package fstree

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Kind is the type of a filesystem object.
type Kind uint8

// The kinds of filesystem objects.
const (
	KindRegular Kind = iota + 1
	KindDir
	KindSymlink
	KindCharDev
	KindBlockDev
	KindFifo
	KindSocket
)

var kindNames = map[Kind]string{
	KindRegular: "file", KindDir: "dir", KindSymlink: "symlink", KindCharDev: "chardev",
	KindBlockDev: "blockdev", KindFifo: "fifo", KindSocket: "socket",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// FileMode returns the fs.FileMode type bits of the kind.
func (k Kind) FileMode() fs.FileMode {
	switch k {
	case KindDir:
		return fs.ModeDir
	case KindSymlink:
		return fs.ModeSymlink
	case KindCharDev:
		return fs.ModeDevice | fs.ModeCharDevice
	case KindBlockDev:
		return fs.ModeDevice
	case KindFifo:
		return fs.ModeNamedPipe
	case KindSocket:
		return fs.ModeSocket
	}
	return 0
}

// Xattr is one extended attribute, e.g. security.selinux.
type Xattr struct {
	Name  string
	Value []byte
}

// Content is the data of a regular file.
type Content interface {
	// Size is the length of the data in bytes.
	Size() int64
	// Open returns a reader over exactly Size bytes.
	Open() (io.ReadCloser, error)
	// Digest identifies the data ("sha256:<hex>"); "" when not known.
	// Equal digests mean equal data.
	Digest() string
}

// Inode is one filesystem object. Directory entries that share an Inode are
// hardlinks of each other.
type Inode struct {
	Kind Kind
	// Mode holds the permission bits including setuid, setgid and sticky
	// (the low 12 bits of st_mode).
	Mode uint32
	UID  uint32
	GID  uint32
	// Mtime is seconds since the epoch.
	Mtime int64
	// Xattrs is sorted by name.
	Xattrs []Xattr
	// Target is a symlink's target.
	Target string
	// Rdev is a device's number (unix.Mkdev encoding).
	Rdev uint64
	// Content is a regular file's data (nil means empty).
	Content Content
	// Entries are a directory's children by name.
	Entries map[string]*Inode
}

// Size is the length of a regular file's data, or of a symlink's target.
func (n *Inode) Size() int64 {
	switch n.Kind {
	case KindRegular:
		if n.Content == nil {
			return 0
		}
		return n.Content.Size()
	case KindSymlink:
		return int64(len(n.Target))
	}
	return 0
}

// Xattr returns the value of the named extended attribute.
func (n *Inode) Xattr(name string) ([]byte, bool) {
	for _, x := range n.Xattrs {
		if x.Name == name {
			return x.Value, true
		}
	}
	return nil, false
}

// SetXattr sets (or replaces) an extended attribute, keeping them sorted.
func (n *Inode) SetXattr(name string, value []byte) {
	i := sort.Search(len(n.Xattrs), func(i int) bool { return n.Xattrs[i].Name >= name })
	if i < len(n.Xattrs) && n.Xattrs[i].Name == name {
		n.Xattrs[i].Value = value
		return
	}
	n.Xattrs = append(n.Xattrs, Xattr{})
	copy(n.Xattrs[i+1:], n.Xattrs[i:])
	n.Xattrs[i] = Xattr{Name: name, Value: value}
}

// SortedNames returns a directory's entry names in byte order.
func (n *Inode) SortedNames() []string {
	names := make([]string, 0, len(n.Entries))
	for name := range n.Entries {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// NewDir returns a directory inode.
func NewDir(mode, uid, gid uint32) *Inode {
	return &Inode{Kind: KindDir, Mode: mode, UID: uid, GID: gid, Entries: map[string]*Inode{}}
}

// Tree is a filesystem tree with a root directory.
type Tree struct {
	Root *Inode
}

// New returns a tree with an empty root directory (mode 0755, root-owned).
func New() *Tree {
	return &Tree{Root: NewDir(0o755, 0, 0)}
}

// ErrNotExist is returned when a path is absent.
var ErrNotExist = fs.ErrNotExist

// CleanPath turns p into a tree-relative path ("" is the root) and refuses
// paths that would leave the tree.
func CleanPath(p string) (string, error) {
	p = strings.TrimPrefix(p, "./")
	for strings.HasPrefix(p, "/") {
		p = p[1:]
	}
	if p == "" || p == "." {
		return "", nil
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("path %q leaves the tree", p)
		}
	}
	return strings.TrimSuffix(path.Clean(p), "/"), nil
}

// Lookup returns the inode at p without following symlinks.
func (t *Tree) Lookup(p string) (*Inode, error) {
	clean, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	cur := t.Root
	if clean == "" {
		return cur, nil
	}
	for _, c := range strings.Split(clean, "/") {
		if cur.Kind != KindDir {
			return nil, fmt.Errorf("looking up %s: %s is not a directory: %w", p, c, ErrNotExist)
		}
		next, ok := cur.Entries[c]
		if !ok {
			return nil, fmt.Errorf("looking up %s: %w", p, ErrNotExist)
		}
		cur = next
	}
	return cur, nil
}

// Parent returns the directory that holds p and p's base name. The
// directory must exist.
func (t *Tree) Parent(p string) (*Inode, string, error) {
	clean, err := CleanPath(p)
	if err != nil {
		return nil, "", err
	}
	if clean == "" {
		return nil, "", errors.New("the root has no parent")
	}
	dir, base := path.Split(clean)
	parent, err := t.Lookup(dir)
	if err != nil {
		return nil, "", err
	}
	if parent.Kind != KindDir {
		return nil, "", fmt.Errorf("parent of %s is not a directory", clean)
	}
	return parent, base, nil
}

// Add places ino at p, replacing whatever was there. The parent directory
// must exist. Adding an existing inode at a second path makes a hardlink.
func (t *Tree) Add(p string, ino *Inode) error {
	parent, base, err := t.Parent(p)
	if err != nil {
		return fmt.Errorf("adding %s: %w", p, err)
	}
	if ino.Kind == KindDir && ino.Entries == nil {
		ino.Entries = map[string]*Inode{}
	}
	parent.Entries[base] = ino
	return nil
}

// MkdirAll creates the directories of p that are missing with the given
// mode and owner, and returns the directory at p.
func (t *Tree) MkdirAll(p string, mode, uid, gid uint32) (*Inode, error) {
	clean, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	cur := t.Root
	if clean == "" {
		return cur, nil
	}
	for _, c := range strings.Split(clean, "/") {
		next, ok := cur.Entries[c]
		if !ok {
			next = NewDir(mode, uid, gid)
			cur.Entries[c] = next
		} else if next.Kind != KindDir {
			return nil, fmt.Errorf("creating directory %s: %s exists and is a %s", p, c, next.Kind)
		}
		cur = next
	}
	return cur, nil
}

// Remove deletes the entry at p (and, for a directory, everything below it).
func (t *Tree) Remove(p string) error {
	parent, base, err := t.Parent(p)
	if err != nil {
		return fmt.Errorf("removing %s: %w", p, err)
	}
	if _, ok := parent.Entries[base]; !ok {
		return fmt.Errorf("removing %s: %w", p, ErrNotExist)
	}
	delete(parent.Entries, base)
	return nil
}

// WalkFunc is called for every entry; p is tree-relative ("" for the root).
// Returning fs.SkipDir from a directory skips its children.
type WalkFunc func(p string, ino *Inode) error

// Walk visits the tree depth-first in sorted order, parents before children.
func (t *Tree) Walk(fn WalkFunc) error {
	return walk("", t.Root, fn)
}

func walk(p string, ino *Inode, fn WalkFunc) error {
	if err := fn(p, ino); err != nil {
		if errors.Is(err, fs.SkipDir) {
			return nil
		}
		return err
	}
	if ino.Kind != KindDir {
		return nil
	}
	for _, name := range ino.SortedNames() {
		child := path.Join(p, name)
		if err := walk(child, ino.Entries[name], fn); err != nil {
			return err
		}
	}
	return nil
}

// LinkCounts returns st_nlink for every inode: the number of entries that
// name it, and for directories 2 + the number of subdirectories.
func (t *Tree) LinkCounts() map[*Inode]uint32 {
	counts := map[*Inode]uint32{}
	_ = t.Walk(func(p string, ino *Inode) error {
		if ino.Kind != KindDir {
			return nil
		}
		counts[ino] = 2
		for _, c := range ino.Entries {
			if c.Kind == KindDir {
				counts[ino]++
			} else {
				counts[c]++
			}
		}
		return nil
	})
	return counts
}

// Clone returns a deep copy of the tree structure: new inodes (hardlinks
// preserved), shared Content.
func (t *Tree) Clone() *Tree {
	seen := map[*Inode]*Inode{}
	return &Tree{Root: cloneInode(t.Root, seen)}
}

func cloneInode(n *Inode, seen map[*Inode]*Inode) *Inode {
	if c, ok := seen[n]; ok {
		return c
	}
	c := *n
	c.Xattrs = append([]Xattr(nil), n.Xattrs...)
	seen[n] = &c
	if n.Kind == KindDir {
		c.Entries = make(map[string]*Inode, len(n.Entries))
		for name, child := range n.Entries {
			c.Entries[name] = cloneInode(child, seen)
		}
	}
	return &c
}
