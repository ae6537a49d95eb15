package fstree

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// The serialized form is JSON lines, one entry per walk step (sorted, parents
// first), so a tree passes between stages and its bytes are deterministic.
// The first entry naming an inode carries its metadata; later entries that
// name the same inode carry only its path and link id.
type entryJSON struct {
	Path   string      `json:"path"`
	Link   int         `json:"link,omitempty"`
	Kind   string      `json:"kind,omitempty"`
	Mode   uint32      `json:"mode,omitempty"`
	UID    uint32      `json:"uid,omitempty"`
	GID    uint32      `json:"gid,omitempty"`
	Mtime  int64       `json:"mtime,omitempty"`
	Xattrs []xattrJSON `json:"xattrs,omitempty"`
	Target string      `json:"target,omitempty"`
	Rdev   uint64      `json:"rdev,omitempty"`
	Size   int64       `json:"size,omitempty"`
	Digest string      `json:"digest,omitempty"`
}

type xattrJSON struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

var kindByName = func() map[string]Kind {
	m := map[string]Kind{}
	for k, n := range kindNames {
		m[n] = k
	}
	return m
}()

// Encode writes the tree to w. Every regular file's content must have a
// Digest that the decoder's resolver can find.
func Encode(w io.Writer, t *Tree) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	ids := map[*Inode]int{}
	counts := t.LinkCounts()
	err := t.Walk(func(p string, ino *Inode) error {
		e := entryJSON{Path: p}
		if ino.Kind != KindDir && counts[ino] > 1 {
			if id, ok := ids[ino]; ok {
				e.Link = id
				return enc.Encode(e)
			}
			ids[ino] = len(ids) + 1
			e.Link = ids[ino]
		}
		e.Kind = ino.Kind.String()
		e.Mode, e.UID, e.GID, e.Mtime = ino.Mode, ino.UID, ino.GID, ino.Mtime
		for _, x := range ino.Xattrs {
			e.Xattrs = append(e.Xattrs, xattrJSON(x))
		}
		e.Target, e.Rdev = ino.Target, ino.Rdev
		if ino.Kind == KindRegular && ino.Content != nil && ino.Content.Size() > 0 {
			e.Size = ino.Content.Size()
			e.Digest = ino.Content.Digest()
			if e.Digest == "" {
				return fmt.Errorf("encoding %s: content has no digest", p)
			}
		}
		return enc.Encode(e)
	})
	if err != nil {
		return fmt.Errorf("encoding tree: %w", err)
	}
	return bw.Flush()
}

// Resolver finds the content for a digest and size read by Decode.
type Resolver func(digest string, size int64) (Content, error)

// Decode reads a tree written by Encode.
func Decode(r io.Reader, resolve Resolver) (*Tree, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var t *Tree
	links := map[int]*Inode{}
	for n := 0; ; n++ {
		var e entryJSON
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding tree entry %d: %w", n, err)
		}
		if e.Kind == "" {
			ino, ok := links[e.Link]
			if !ok || t == nil {
				return nil, fmt.Errorf("decoding tree: %s links to unknown inode %d", e.Path, e.Link)
			}
			if err := t.Add(e.Path, ino); err != nil {
				return nil, fmt.Errorf("decoding tree: %w", err)
			}
			continue
		}
		kind, ok := kindByName[e.Kind]
		if !ok {
			return nil, fmt.Errorf("decoding tree: %s has unknown kind %q", e.Path, e.Kind)
		}
		ino := &Inode{Kind: kind, Mode: e.Mode, UID: e.UID, GID: e.GID, Mtime: e.Mtime,
			Target: e.Target, Rdev: e.Rdev}
		for _, x := range e.Xattrs {
			ino.Xattrs = append(ino.Xattrs, Xattr(x))
		}
		if kind == KindDir {
			ino.Entries = map[string]*Inode{}
		}
		if e.Digest != "" {
			c, err := resolve(e.Digest, e.Size)
			if err != nil {
				return nil, fmt.Errorf("decoding tree: content of %s: %w", e.Path, err)
			}
			ino.Content = c
		}
		if e.Link != 0 {
			links[e.Link] = ino
		}
		if t == nil {
			if e.Path != "" || kind != KindDir {
				return nil, fmt.Errorf("decoding tree: first entry %q is not the root directory", e.Path)
			}
			t = &Tree{Root: ino}
			continue
		}
		if err := t.Add(e.Path, ino); err != nil {
			return nil, fmt.Errorf("decoding tree: %w", err)
		}
	}
	if t == nil {
		return nil, fmt.Errorf("decoding tree: no entries")
	}
	return t, nil
}
