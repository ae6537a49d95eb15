package fstree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FromDir builds a tree from the directory dir on disk: types, modes,
// owners, mtimes, xattrs, symlink targets, device numbers and hardlinks
// (files with the same device and inode number share an *Inode). Regular
// file data is copied into store when store is not nil; otherwise the tree
// refers to the files in place (see FileContent), and they must not change
// while the tree is used.
func FromDir(dir string, store *Store) (*Tree, error) {
	t := &Tree{}
	type key struct{ dev, ino uint64 }
	links := map[key]*Inode{}
	err := filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(full, &st); err != nil {
			return fmt.Errorf("stat %s: %w", full, err)
		}
		k := key{uint64(st.Dev), st.Ino}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
			if ino, ok := links[k]; ok {
				return t.Add(rel, ino)
			}
		}
		ino := &Inode{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Mtime: st.Mtim.Sec}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			ino.Kind = KindDir
			ino.Entries = map[string]*Inode{}
		case unix.S_IFREG:
			ino.Kind = KindRegular
			c, err := loadContent(full, st.Size, store)
			if err != nil {
				return err
			}
			ino.Content = c
		case unix.S_IFLNK:
			ino.Kind = KindSymlink
			target, err := os.Readlink(full)
			if err != nil {
				return fmt.Errorf("reading link %s: %w", full, err)
			}
			ino.Target = target
		case unix.S_IFCHR:
			ino.Kind, ino.Rdev = KindCharDev, uint64(st.Rdev)
		case unix.S_IFBLK:
			ino.Kind, ino.Rdev = KindBlockDev, uint64(st.Rdev)
		case unix.S_IFIFO:
			ino.Kind = KindFifo
		case unix.S_IFSOCK:
			ino.Kind = KindSocket
		default:
			return fmt.Errorf("%s: unknown file type %o", full, st.Mode&unix.S_IFMT)
		}
		xattrs, err := readXattrs(full)
		if err != nil {
			return err
		}
		for _, x := range xattrs {
			ino.SetXattr(x.Name, x.Value)
		}
		if rel == "." {
			t.Root = ino
			return nil
		}
		if st.Nlink > 1 && ino.Kind != KindDir {
			links[k] = ino
		}
		return t.Add(rel, ino)
	})
	if err != nil {
		return nil, fmt.Errorf("loading tree from %s: %w", dir, err)
	}
	if t.Root == nil || t.Root.Kind != KindDir {
		return nil, fmt.Errorf("loading tree from %s: not a directory", dir)
	}
	return t, nil
}

func loadContent(path string, size int64, store *Store) (Content, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	if store != nil {
		c, err := store.Put(f)
		if err != nil {
			return nil, fmt.Errorf("storing %s: %w", path, err)
		}
		return c, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if n != size {
		return nil, fmt.Errorf("reading %s: size changed from %d to %d", path, size, n)
	}
	return &FileContent{path: path, size: n, digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

func readXattrs(path string) ([]Xattr, error) {
	size, err := unix.Llistxattr(path, nil)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing xattrs of %s: %w", path, err)
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil, fmt.Errorf("listing xattrs of %s: %w", path, err)
	}
	var out []Xattr
	for _, name := range splitNUL(buf[:size]) {
		n, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			return nil, fmt.Errorf("reading xattr %s of %s: %w", name, path, err)
		}
		val := make([]byte, n)
		n, err = unix.Lgetxattr(path, name, val)
		if err != nil {
			return nil, fmt.Errorf("reading xattr %s of %s: %w", name, path, err)
		}
		out = append(out, Xattr{Name: name, Value: val[:n]})
	}
	return out, nil
}

func splitNUL(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}
