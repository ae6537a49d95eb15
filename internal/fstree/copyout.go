package fstree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CopyOut writes the subtrees at the given paths (those that exist) into
// dir as the current user: directories, regular files and symlinks with
// their permission bits, without owners, xattrs or device nodes. It is for
// reading a few files of the image (boot templates, EFI binaries) with
// ordinary tools, not for reproducing the tree.
func (t *Tree) CopyOut(dir string, paths ...string) error {
	for _, p := range paths {
		clean, err := CleanPath(p)
		if err != nil {
			return err
		}
		ino, err := t.Lookup(clean)
		if errors.Is(err, ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(clean)), 0o755); err != nil {
			return fmt.Errorf("copying out %s: %w", clean, err)
		}
		err = walk(clean, ino, func(q string, n *Inode) error {
			dst := filepath.Join(dir, q)
			switch n.Kind {
			case KindDir:
				return os.MkdirAll(dst, fs.FileMode(n.Mode&0o777)|0o700)
			case KindRegular:
				if err := writeContent(dst, n.Content); err != nil {
					return err
				}
				return os.Chmod(dst, fs.FileMode(n.Mode&0o777)|0o600)
			case KindSymlink:
				return os.Symlink(n.Target, dst)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("copying out %s: %w", clean, err)
		}
	}
	return nil
}
