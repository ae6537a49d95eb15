package fstree

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Materialize writes the tree into dir (which must exist and be empty, or
// not exist) with owners, modes, xattrs, device nodes, hardlinks and mtimes.
// Setting owners and security.* xattrs needs root.
func (t *Tree) Materialize(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("materializing tree: %w", err)
	}
	written := map[*Inode]string{}
	var dirs []string
	dirInodes := map[string]*Inode{}
	err := t.Walk(func(p string, ino *Inode) error {
		dst := filepath.Join(dir, p)
		if first, ok := written[ino]; ok && ino.Kind != KindDir {
			if err := os.Link(first, dst); err != nil {
				return fmt.Errorf("linking %s: %w", p, err)
			}
			return nil
		}
		if err := createNode(dst, p, ino); err != nil {
			return err
		}
		written[ino] = dst
		if err := applyMetadata(dst, ino); err != nil {
			return fmt.Errorf("setting metadata of %s: %w", p, err)
		}
		if ino.Kind == KindDir {
			dirs = append(dirs, dst)
			dirInodes[dst] = ino
		} else if err := setMtime(dst, ino.Mtime); err != nil {
			return fmt.Errorf("setting mtime of %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("materializing tree in %s: %w", dir, err)
	}
	// Directory mtimes change while children are created: set them last,
	// deepest first.
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if err := setMtime(d, dirInodes[d].Mtime); err != nil {
			return fmt.Errorf("materializing tree: setting mtime of %s: %w", d, err)
		}
	}
	return nil
}

func createNode(dst, p string, ino *Inode) error {
	var err error
	switch ino.Kind {
	case KindDir:
		err = os.Mkdir(dst, 0o700)
		if errors.Is(err, os.ErrExist) && p == "" {
			err = nil
		}
	case KindRegular:
		err = writeContent(dst, ino.Content)
	case KindSymlink:
		err = os.Symlink(ino.Target, dst)
	case KindCharDev:
		err = unix.Mknod(dst, unix.S_IFCHR|0o600, int(ino.Rdev))
	case KindBlockDev:
		err = unix.Mknod(dst, unix.S_IFBLK|0o600, int(ino.Rdev))
	case KindFifo:
		err = unix.Mkfifo(dst, 0o600)
	case KindSocket:
		err = unix.Mknod(dst, unix.S_IFSOCK|0o600, 0)
	default:
		err = fmt.Errorf("unknown kind %s", ino.Kind)
	}
	if err != nil {
		return fmt.Errorf("creating %s %s: %w", ino.Kind, p, err)
	}
	return nil
}

func writeContent(dst string, c Content) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if c != nil && c.Size() > 0 {
		if _, ok := c.(ZeroContent); ok {
			err = f.Truncate(c.Size())
		} else {
			var r io.ReadCloser
			if r, err = c.Open(); err == nil {
				_, err = io.Copy(f, r)
				r.Close()
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func applyMetadata(dst string, ino *Inode) error {
	if err := os.Lchown(dst, int(ino.UID), int(ino.GID)); err != nil {
		return err
	}
	for _, x := range ino.Xattrs {
		if err := unix.Lsetxattr(dst, x.Name, x.Value, 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", x.Name, err)
		}
	}
	if ino.Kind == KindSymlink {
		return nil
	}
	// chmod after chown: chown clears setuid/setgid bits.
	return unix.Fchmodat(unix.AT_FDCWD, dst, ino.Mode&0o7777, 0)
}

func setMtime(dst string, mtime int64) error {
	ts := []unix.Timespec{{Sec: mtime}, {Sec: mtime}}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}
