package ostree

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"sort"
	"strings"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/gvariant"
)

// Object types, as used in object file names (objects/XX/<rest>.<type>).
const (
	ObjCommit     = "commit"
	ObjCommitMeta = "commitmeta"
	ObjDirTree    = "dirtree"
	ObjDirMeta    = "dirmeta"
	ObjFile       = "file"
)

// GVariant types of the ostree metadata objects.
const (
	DirMetaType  = "(uuua(ayay))"
	DirTreeType  = "(a(say)a(sayay))"
	CommitType   = "(a{sv}aya(say)sstayay)"
	FileHdrType  = "(uuuusa(ayay))"
	XattrsType   = "a(ayay)"
	MetadataType = "a{sv}"
)

// File type bits of st_mode.
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

// ObjectPath is the path of an object inside a repository:
// objects/XX/<62 hex>.<type>.
func ObjectPath(checksum, typ string) string {
	return "objects/" + checksum[:2] + "/" + checksum[2:] + "." + typ
}

// ValidChecksum reports whether s is 64 lowercase hex digits.
func ValidChecksum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func checksumBytes(c string) ([]byte, error) {
	b, err := hex.DecodeString(c)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("invalid checksum %q", c)
	}
	return b, nil
}

// encodeXattrs turns xattrs into the a(ayay) value ostree uses: names
// include their trailing NUL.
func encodeXattrs(xs []fstree.Xattr) []any {
	out := make([]any, 0, len(xs))
	for _, x := range xs {
		name := append([]byte(x.Name), 0)
		out = append(out, []any{name, append([]byte{}, x.Value...)})
	}
	return out
}

func decodeXattrs(v any) ([]fstree.Xattr, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("xattrs are %T, not an array", v)
	}
	out := make([]fstree.Xattr, 0, len(items))
	for _, it := range items {
		pair := it.([]any)
		name := pair[0].([]byte)
		if len(name) == 0 || name[len(name)-1] != 0 {
			return nil, fmt.Errorf("xattr name %q not NUL-terminated", name)
		}
		out = append(out, fstree.Xattr{Name: string(name[:len(name)-1]), Value: pair[1].([]byte)})
	}
	return out, nil
}

// EncodeXattrs serializes xattrs as ostree's a(ayay), in the given order.
func EncodeXattrs(xs []fstree.Xattr) ([]byte, error) {
	return gvariant.Encode(XattrsType, encodeXattrs(xs))
}

// DecodeXattrs parses a serialized a(ayay), keeping the order.
func DecodeXattrs(b []byte) ([]fstree.Xattr, error) {
	v, err := gvariant.Decode(XattrsType, b)
	if err != nil {
		return nil, fmt.Errorf("decoding xattrs: %w", err)
	}
	return decodeXattrs(v)
}

// DirMeta is a dirmeta object: owner, mode (with S_IFDIR) and xattrs.
type DirMeta struct {
	UID, GID, Mode uint32
	Xattrs         []fstree.Xattr
}

// Encode serializes the dirmeta object.
func (m DirMeta) Encode() ([]byte, error) {
	return gvariant.Encode(DirMetaType, []any{
		gvariant.SwapU32(m.UID), gvariant.SwapU32(m.GID), gvariant.SwapU32(m.Mode), encodeXattrs(m.Xattrs),
	})
}

// DecodeDirMeta parses a dirmeta object.
func DecodeDirMeta(b []byte) (DirMeta, error) {
	v, err := gvariant.Decode(DirMetaType, b)
	if err != nil {
		return DirMeta{}, fmt.Errorf("decoding dirmeta: %w", err)
	}
	t := v.([]any)
	xs, err := decodeXattrs(t[3])
	if err != nil {
		return DirMeta{}, fmt.Errorf("decoding dirmeta: %w", err)
	}
	m := DirMeta{UID: gvariant.SwapU32(t[0].(uint32)), GID: gvariant.SwapU32(t[1].(uint32)),
		Mode: gvariant.SwapU32(t[2].(uint32)), Xattrs: xs}
	if m.Mode&sIFMT != sIFDIR {
		return DirMeta{}, fmt.Errorf("decoding dirmeta: mode %o is not a directory", m.Mode)
	}
	return m, nil
}

// TreeFile is a file entry of a dirtree.
type TreeFile struct {
	Name     string
	Checksum string
}

// TreeDir is a subdirectory entry of a dirtree.
type TreeDir struct {
	Name         string
	TreeChecksum string
	MetaChecksum string
}

// DirTree is a dirtree object.
type DirTree struct {
	Files []TreeFile
	Dirs  []TreeDir
}

// Encode serializes the dirtree, sorting entries by name as ostree does.
func (d DirTree) Encode() ([]byte, error) {
	files := append([]TreeFile(nil), d.Files...)
	dirs := append([]TreeDir(nil), d.Dirs...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].Name < dirs[j].Name })
	fv := make([]any, 0, len(files))
	for _, f := range files {
		c, err := checksumBytes(f.Checksum)
		if err != nil {
			return nil, err
		}
		fv = append(fv, []any{f.Name, c})
	}
	dv := make([]any, 0, len(dirs))
	for _, d := range dirs {
		tc, err := checksumBytes(d.TreeChecksum)
		if err != nil {
			return nil, err
		}
		mc, err := checksumBytes(d.MetaChecksum)
		if err != nil {
			return nil, err
		}
		dv = append(dv, []any{d.Name, tc, mc})
	}
	return gvariant.Encode(DirTreeType, []any{fv, dv})
}

// DecodeDirTree parses a dirtree object and checks its entry names.
func DecodeDirTree(b []byte) (DirTree, error) {
	v, err := gvariant.Decode(DirTreeType, b)
	if err != nil {
		return DirTree{}, fmt.Errorf("decoding dirtree: %w", err)
	}
	t := v.([]any)
	var d DirTree
	for _, it := range t[0].([]any) {
		e := it.([]any)
		c := e[1].([]byte)
		if len(c) != 32 {
			return DirTree{}, fmt.Errorf("decoding dirtree: file %q has a %d-byte checksum", e[0], len(c))
		}
		d.Files = append(d.Files, TreeFile{Name: e[0].(string), Checksum: hex.EncodeToString(c)})
	}
	for _, it := range t[1].([]any) {
		e := it.([]any)
		tc, mc := e[1].([]byte), e[2].([]byte)
		if len(tc) != 32 || len(mc) != 32 {
			return DirTree{}, fmt.Errorf("decoding dirtree: directory %q has a bad checksum", e[0])
		}
		d.Dirs = append(d.Dirs, TreeDir{Name: e[0].(string), TreeChecksum: hex.EncodeToString(tc),
			MetaChecksum: hex.EncodeToString(mc)})
	}
	for _, f := range d.Files {
		if err := checkEntryName(f.Name); err != nil {
			return DirTree{}, err
		}
	}
	for _, dd := range d.Dirs {
		if err := checkEntryName(dd.Name); err != nil {
			return DirTree{}, err
		}
	}
	return d, nil
}

func checkEntryName(n string) error {
	if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
		return fmt.Errorf("decoding dirtree: invalid entry name %q", n)
	}
	return nil
}

// MetaItem is one entry of a commit's a{sv} metadata.
type MetaItem struct {
	Key   string
	Value gvariant.Variant
}

// Metadata is an a{sv} dictionary in serialized order.
type Metadata []MetaItem

// Lookup returns the value stored under key.
func (m Metadata) Lookup(key string) (gvariant.Variant, bool) {
	for _, it := range m {
		if it.Key == key {
			return it.Value, true
		}
	}
	return gvariant.Variant{}, false
}

// String returns the value of key if it is a string.
func (m Metadata) String(key string) (string, bool) {
	v, ok := m.Lookup(key)
	if !ok {
		return "", false
	}
	s, ok := v.Value.(string)
	return s, ok
}

func (m Metadata) value() []any {
	out := make([]any, 0, len(m))
	for _, it := range m {
		out = append(out, []any{it.Key, it.Value})
	}
	return out
}

// Commit is a commit object.
type Commit struct {
	Metadata  Metadata
	Parent    string // checksum or ""
	Subject   string
	Body      string
	Timestamp uint64 // seconds since the epoch
	RootTree  string
	RootMeta  string
}

// Encode serializes the commit.
func (c Commit) Encode() ([]byte, error) {
	var parent []byte = []byte{}
	if c.Parent != "" {
		p, err := checksumBytes(c.Parent)
		if err != nil {
			return nil, err
		}
		parent = p
	}
	rt, err := checksumBytes(c.RootTree)
	if err != nil {
		return nil, err
	}
	rm, err := checksumBytes(c.RootMeta)
	if err != nil {
		return nil, err
	}
	return gvariant.Encode(CommitType, []any{c.Metadata.value(), parent, []any{}, c.Subject, c.Body,
		gvariant.SwapU64(c.Timestamp), rt, rm})
}

// DecodeCommit parses a commit object.
func DecodeCommit(b []byte) (Commit, error) {
	v, err := gvariant.Decode(CommitType, b)
	if err != nil {
		return Commit{}, fmt.Errorf("decoding commit: %w", err)
	}
	t := v.([]any)
	var c Commit
	for _, it := range t[0].([]any) {
		e := it.([]any)
		c.Metadata = append(c.Metadata, MetaItem{Key: e[0].(string), Value: e[1].(gvariant.Variant)})
	}
	if p := t[1].([]byte); len(p) == 32 {
		c.Parent = hex.EncodeToString(p)
	}
	c.Subject, c.Body = t[3].(string), t[4].(string)
	c.Timestamp = gvariant.SwapU64(t[5].(uint64))
	rt, rm := t[6].([]byte), t[7].([]byte)
	if len(rt) != 32 || len(rm) != 32 {
		return Commit{}, fmt.Errorf("decoding commit: bad root checksums")
	}
	c.RootTree, c.RootMeta = hex.EncodeToString(rt), hex.EncodeToString(rm)
	return c, nil
}

// contentHeader is ostree's length-prefixed file header
// (_ostree_file_header_new + variant_to_lenprefixed_buffer): BE32 length,
// 4 bytes of padding, then the (uuuusa(ayay)) header.
func contentHeader(uid, gid, mode uint32, target string, xattrs []fstree.Xattr) ([]byte, error) {
	h, err := gvariant.Encode(FileHdrType, []any{gvariant.SwapU32(uid), gvariant.SwapU32(gid),
		gvariant.SwapU32(mode), uint32(0), target, encodeXattrs(xattrs)})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	var l [8]byte
	binary.BigEndian.PutUint32(l[:4], uint32(len(h)))
	buf.Write(l[:])
	buf.Write(h)
	return buf.Bytes(), nil
}

// NewContentHash starts the checksum of a content object: the returned
// hash has the header written; write the file's data (nothing for a
// symlink) and take Sum. mode includes the S_IFREG or S_IFLNK bits.
func NewContentHash(uid, gid, mode uint32, target string, xattrs []fstree.Xattr) (hash.Hash, error) {
	hdr, err := contentHeader(uid, gid, mode, target, xattrs)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(hdr)
	return h, nil
}

// SymlinkChecksum is the content checksum of a symlink object.
func SymlinkChecksum(uid, gid, mode uint32, target string, xattrs []fstree.Xattr) (string, error) {
	h, err := NewContentHash(uid, gid, sIFLNK|mode&0o7777, target, xattrs)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EscapeRef escapes s for use in a ref name as ostree-ext does
// (refescape.rs): ASCII alphanumerics and '-' stay, '_' doubles, '/'
// stays after an alphanumeric unless last, all else becomes _XX_.
func EscapeRef(s string) string {
	var b strings.Builder
	prevAlnum := false
	for i, r := range s {
		alnum := r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		switch {
		case alnum || r == '-':
			b.WriteRune(r)
		case r == '_':
			b.WriteString("__")
		case r == '/' && prevAlnum && i != len(s)-1:
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "_%02X_", r)
		}
		prevAlnum = alnum
	}
	return b.String()
}
