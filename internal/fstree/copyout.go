package fstree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxLinkHops bounds symlink resolution, as the kernel's ELOOP does.
const maxLinkHops = 40

// Resolve returns the inode at p and its real path, following symlinks
// inside the tree the way a chroot would: absolute targets start at the
// tree's root and ".." never climbs above it.
func (t *Tree) Resolve(p string) (*Inode, string, error) {
	comps := strings.Split(p, "/")
	stack := []*Inode{t.Root}
	var names []string
	hops := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) > 1 {
				stack, names = stack[:len(stack)-1], names[:len(names)-1]
			}
			continue
		}
		cur := stack[len(stack)-1]
		if cur.Kind != KindDir {
			return nil, "", fmt.Errorf("resolving %s: %s is not a directory: %w", p, path.Join(names...), ErrNotExist)
		}
		next, ok := cur.Entries[c]
		if !ok {
			return nil, "", fmt.Errorf("resolving %s: %w", p, ErrNotExist)
		}
		if next.Kind == KindSymlink {
			if hops++; hops > maxLinkHops {
				return nil, "", fmt.Errorf("resolving %s: more than %d symlinks", p, maxLinkHops)
			}
			if strings.HasPrefix(next.Target, "/") {
				stack, names = stack[:1], nil
			}
			comps = append(strings.Split(next.Target, "/"), comps...)
			continue
		}
		stack, names = append(stack, next), append(names, c)
	}
	return stack[len(stack)-1], path.Join(names...), nil
}

// CopyOut writes the subtrees at the given paths (those that exist) into
// dir as the current user: directories and regular files with their
// permission bits, without owners, xattrs or device nodes. Symlinks are
// resolved inside the tree (never on the host) and written as what they
// point at; dangling ones are left out. It is for reading a few files of
// the image (boot templates, os-release, EFI binaries) with ordinary tools.
func (t *Tree) CopyOut(dir string, paths ...string) error {
	for _, p := range paths {
		clean, err := CleanPath(p)
		if err != nil {
			return err
		}
		ino, real, err := t.Resolve(clean)
		if errors.Is(err, ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(clean)), 0o755); err != nil {
			return fmt.Errorf("copying out %s: %w", clean, err)
		}
		if err := t.copyOut(filepath.Join(dir, clean), real, ino, 0); err != nil {
			return fmt.Errorf("copying out %s: %w", clean, err)
		}
	}
	return nil
}

// maxCopyDepth stops directory symlinks that loop back on themselves.
const maxCopyDepth = 64

func (t *Tree) copyOut(dst, real string, n *Inode, depth int) error {
	switch n.Kind {
	case KindRegular:
		if err := writeContent(dst, n.Content); err != nil {
			return err
		}
		return os.Chmod(dst, fs.FileMode(n.Mode&0o777)|0o600)
	case KindDir:
		if depth > maxCopyDepth {
			return fmt.Errorf("%s: directories nested more than %d deep (a symlink loop?)", real, maxCopyDepth)
		}
		if err := os.MkdirAll(dst, fs.FileMode(n.Mode&0o777)|0o700); err != nil {
			return err
		}
		for _, name := range n.SortedNames() {
			child, childReal := n.Entries[name], path.Join(real, name)
			if child.Kind == KindSymlink {
				var err error
				if child, childReal, err = t.Resolve(childReal); errors.Is(err, ErrNotExist) {
					continue
				} else if err != nil {
					return err
				}
			}
			if err := t.copyOut(filepath.Join(dst, name), childReal, child, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
