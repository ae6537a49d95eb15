package ostree

import (
	"archive/tar"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/okd-project/scos-builder/internal/fstree"
)

const selinuxXattr = "security.selinux"

// excludedTopLevel are API filesystems: the directory itself is kept,
// everything below it is dropped (ostree-ext EXCLUDED_TOPLEVEL_PATHS).
var excludedTopLevel = map[string]bool{"run": true, "tmp": true, "proc": true, "sys": true, "dev": true}

// mapDerivedPath applies ostree-ext's derived-layer path rules
// (normalize_validate_path with retain_var): usr kept, etc → usr/etc, var
// kept, API filesystem directories kept empty, any other top-level
// directory dropped. It returns the mapped components, or the top-level
// name the entry was dropped under.
func mapDerivedPath(comps []string) ([]string, string) {
	switch first := comps[0]; {
	case first == "usr" || first == "var":
		return comps, ""
	case first == "etc":
		return append([]string{"usr"}, comps...), ""
	case excludedTopLevel[first]:
		if len(comps) == 1 {
			return comps, ""
		}
		return nil, first
	default:
		return nil, first
	}
}

// splitTarPath cleans a derived-layer entry name into components,
// refusing absolute names and .. components.
func splitTarPath(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("entry %q has an absolute path", name)
	}
	if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return nil, fmt.Errorf("entry %q is not valid UTF-8, which ostree requires", name)
	}
	var comps []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			return nil, fmt.Errorf("entry %q leaves the tree (..)", name)
		default:
			comps = append(comps, c)
		}
	}
	return comps, nil
}

// symlinkEscapes reports whether a relative symlink target, resolved from
// the directory at depth dirDepth, climbs above the root.
func symlinkEscapes(dirDepth int, target string) bool {
	if strings.HasPrefix(target, "/") {
		return false
	}
	d := dirDepth
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			d--
			if d < 0 {
				return true
			}
		default:
			d++
		}
	}
	return false
}

type savedSysrootFile struct {
	hdr     tar.Header
	content fstree.Content
}

// derivedLayer is the state of one derived layer being applied.
type derivedLayer struct {
	im      *importer
	t       *fstree.Tree
	l       Layer
	added   map[string]bool // mapped paths written by this layer
	saved   map[string]savedSysrootFile
	rehomed map[string]string
}

// applyDerivedLayer folds a Containerfile layer into the tree as
// ostree-ext's import does: path rules, whiteouts, opaque directories,
// union semantics for existing directories, hardlinks within the layer.
func (im *importer) applyDerivedLayer(ctx context.Context, t *fstree.Tree, l Layer, diffID string) error {
	lr, err := openLayer(l)
	if err != nil {
		return err
	}
	defer lr.Close()
	d := &derivedLayer{im: im, t: t, l: l, added: map[string]bool{},
		saved: map[string]savedSysrootFile{}, rehomed: map[string]string{}}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading derived layer %s: %w", l.name(), err)
		}
		if err := d.apply(lr, hdr); err != nil {
			return fmt.Errorf("derived layer %s: %w", l.name(), err)
		}
	}
	return lr.finish(l, diffID)
}

func (d *derivedLayer) filtered(top string) {
	m := d.im.stats.Filtered[d.l.name()]
	if m == nil {
		m = map[string]uint32{}
		d.im.stats.Filtered[d.l.name()] = m
	}
	m[top]++
}

func (d *derivedLayer) apply(r io.Reader, hdr *tar.Header) error {
	comps, err := splitTarPath(hdr.Name)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return nil // the root directory keeps the base commit's metadata
	}
	raw := strings.Join(comps, "/")
	modified := hdr.ModTime.Unix() > 0
	// Files modified in place through their hardlink into the repository
	// are re-homed to their checkout path (ostree-ext filter_tar).
	if strings.HasPrefix(raw, repoPrefix) && modified && isRegular(hdr) {
		var c fstree.Content
		if hdr.Size > 0 {
			sc, err := d.im.store.Put(r)
			if err != nil {
				return err
			}
			c = sc
		}
		d.saved[raw] = savedSysrootFile{hdr: *hdr, content: c}
		return nil
	}
	if hdr.Typeflag == tar.TypeLink && modified {
		target := normalizeTarName(hdr.Linkname)
		if strings.HasPrefix(target, repoPrefix) {
			if s, ok := d.saved[target]; ok {
				delete(d.saved, target)
				h := s.hdr
				h.Name, h.Typeflag, h.Linkname = hdr.Name, tar.TypeReg, ""
				mapped, err := d.applyFile(comps, &h, s.content, nil)
				if err == nil && mapped != "" {
					d.rehomed[target] = mapped
				}
				return err
			}
			if first, ok := d.rehomed[target]; ok {
				mapped, top := mapDerivedPath(comps)
				if mapped == nil {
					d.filtered(top)
					return nil
				}
				return d.applyLinkTo(mapped, hdr, first)
			}
		}
	}
	mapped, top := mapDerivedPath(comps)
	if mapped == nil {
		d.filtered(top)
		return nil
	}
	base := mapped[len(mapped)-1]
	if strings.HasPrefix(base, ".wh.") {
		return d.whiteout(mapped)
	}
	d.im.stats.DerivedEntries++
	switch hdr.Typeflag {
	case tar.TypeDir:
		return d.applyDir(mapped, hdr)
	case tar.TypeReg, tar.TypeRegA:
		_, err := d.applyFile(comps, hdr, nil, r)
		return err
	case tar.TypeSymlink:
		if symlinkEscapes(len(comps)-1, hdr.Linkname) {
			return fmt.Errorf("symlink %s -> %s points outside the tree", raw, hdr.Linkname)
		}
		_, err := d.applyFile(comps, hdr, nil, nil)
		return err
	case tar.TypeLink:
		return d.applyLink(mapped, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%s is a device or fifo, which an ostree commit cannot hold", raw)
	case tar.TypeXGlobalHeader:
		return nil
	}
	return fmt.Errorf("%s has unsupported tar entry type %c", raw, hdr.Typeflag)
}

// parentDir returns the directory that holds mapped, creating missing
// parents (0755 root, labelled like their parent) and refusing to go
// through symlinks or files.
func (d *derivedLayer) parentDir(mapped []string) (*fstree.Inode, error) {
	cur := d.t.Root
	for i, c := range mapped[:len(mapped)-1] {
		next, ok := cur.Entries[c]
		switch {
		case !ok:
			next = fstree.NewDir(0o755, 0, 0)
			if lbl, ok := cur.Xattr(selinuxXattr); ok {
				next.SetXattr(selinuxXattr, lbl)
				d.im.stats.InheritedLabels++
			}
			cur.Entries[c] = next
			d.added[strings.Join(mapped[:i+1], "/")] = true
		case next.Kind == fstree.KindSymlink:
			return nil, fmt.Errorf("%s goes through symlink /%s", strings.Join(mapped, "/"), strings.Join(mapped[:i+1], "/"))
		case next.Kind != fstree.KindDir:
			return nil, fmt.Errorf("%s: /%s is a %s, not a directory", strings.Join(mapped, "/"), strings.Join(mapped[:i+1], "/"), next.Kind)
		}
		cur = next
	}
	return cur, nil
}

// label returns the SELinux label for a new entry: the label of the entry
// it replaces, else its parent directory's.
func (d *derivedLayer) label(parent, existing *fstree.Inode) ([]byte, bool) {
	if existing != nil {
		if lbl, ok := existing.Xattr(selinuxXattr); ok {
			return lbl, true
		}
	}
	if lbl, ok := parent.Xattr(selinuxXattr); ok {
		d.im.stats.InheritedLabels++
		return lbl, true
	}
	return nil, false
}

// entryXattrs are the PAX SCHILY.xattr.* records of hdr except the
// SELinux label, which the labelling rules decide.
func entryXattrs(hdr *tar.Header) []fstree.Xattr {
	var out []fstree.Xattr
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if ok && name != selinuxXattr {
			out = append(out, fstree.Xattr{Name: name, Value: []byte(v)})
		}
	}
	return out
}

func (d *derivedLayer) applyDir(mapped []string, hdr *tar.Header) error {
	parent, err := d.parentDir(mapped)
	if err != nil {
		return err
	}
	base := mapped[len(mapped)-1]
	existing := parent.Entries[base]
	d.added[strings.Join(mapped, "/")] = true
	if existing != nil && existing.Kind == fstree.KindDir {
		return nil // union checkout: existing directories keep their metadata
	}
	dir := fstree.NewDir(uint32(hdr.Mode)&0o7777, uint32(hdr.Uid), uint32(hdr.Gid))
	for _, x := range entryXattrs(hdr) {
		dir.SetXattr(x.Name, x.Value)
	}
	if lbl, ok := d.label(parent, existing); ok {
		dir.SetXattr(selinuxXattr, lbl)
	}
	parent.Entries[base] = dir
	return nil
}

// applyFile adds a regular file or symlink at the mapped path of comps.
// Data comes from content (re-homed files) or from r.
func (d *derivedLayer) applyFile(comps []string, hdr *tar.Header, content fstree.Content, r io.Reader) (string, error) {
	mapped, top := mapDerivedPath(comps)
	if mapped == nil {
		d.filtered(top)
		return "", nil
	}
	parent, err := d.parentDir(mapped)
	if err != nil {
		return "", err
	}
	base := mapped[len(mapped)-1]
	existing := parent.Entries[base]
	xs := entryXattrs(hdr)
	if lbl, ok := d.label(parent, existing); ok {
		xs = append(xs, fstree.Xattr{Name: selinuxXattr, Value: lbl})
	}
	ino := &fstree.Inode{UID: uint32(hdr.Uid), GID: uint32(hdr.Gid), Mode: uint32(hdr.Mode) & 0o7777}
	for _, x := range xs {
		ino.SetXattr(x.Name, x.Value)
	}
	var sum string
	if hdr.Typeflag == tar.TypeSymlink {
		ino.Kind, ino.Mode, ino.Target = fstree.KindSymlink, 0o777, hdr.Linkname
		if sum, err = SymlinkChecksum(ino.UID, ino.GID, ino.Mode, ino.Target, ino.Xattrs); err != nil {
			return "", err
		}
	} else {
		ino.Kind = fstree.KindRegular
		h, err := NewContentHash(ino.UID, ino.GID, sIFREG|ino.Mode, "", ino.Xattrs)
		if err != nil {
			return "", err
		}
		switch {
		case content != nil && content.Size() > 0:
			rc, err := content.Open()
			if err != nil {
				return "", err
			}
			_, err = io.Copy(h, rc)
			rc.Close()
			if err != nil {
				return "", err
			}
			ino.Content = content
		case r != nil && hdr.Size > 0:
			c, err := d.im.store.Put(io.TeeReader(r, h))
			if err != nil {
				return "", err
			}
			ino.Content = c
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	if obj, ok := d.im.objects[sum]; ok {
		ino = obj
	} else {
		d.im.objects[sum] = ino
		d.im.objSum[ino] = sum
		d.im.derived[sum] = true
		if ino.Kind == fstree.KindRegular {
			d.im.stats.ContentBytes += ino.Size()
		}
	}
	parent.Entries[base] = ino
	p := strings.Join(mapped, "/")
	d.added[p] = true
	return p, nil
}

// applyLink makes mapped a hardlink of an earlier entry (a path of the
// tree, or a repository object).
func (d *derivedLayer) applyLink(mapped []string, hdr *tar.Header) error {
	if strings.HasPrefix(hdr.Linkname, "/") {
		return fmt.Errorf("hardlink %s -> %s has an absolute target", hdr.Name, hdr.Linkname)
	}
	tcomps, err := splitTarPath(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hardlink %s: %w", hdr.Name, err)
	}
	if len(tcomps) == 0 {
		return fmt.Errorf("hardlink %s has an empty target", hdr.Name)
	}
	target := strings.Join(tcomps, "/")
	if strings.HasPrefix(target, repoPrefix) {
		sum, typ, err := parseObjectPath(target[len(repoPrefix):])
		if err != nil || typ != ObjFile {
			return fmt.Errorf("hardlink %s -> %s: not a content object", hdr.Name, hdr.Linkname)
		}
		obj, ok := d.im.objects[sum]
		if !ok {
			return fmt.Errorf("hardlink %s -> %s: object not in the image", hdr.Name, hdr.Linkname)
		}
		return d.place(mapped, obj)
	}
	tm, top := mapDerivedPath(tcomps)
	if tm == nil {
		return fmt.Errorf("hardlink %s -> %s: target is under /%s, which is dropped", hdr.Name, hdr.Linkname, top)
	}
	return d.applyLinkTo(mapped, hdr, strings.Join(tm, "/"))
}

func (d *derivedLayer) applyLinkTo(mapped []string, hdr *tar.Header, target string) error {
	obj, err := d.t.Lookup(target)
	if err != nil {
		return fmt.Errorf("hardlink %s -> %s: %w", hdr.Name, target, err)
	}
	if obj.Kind == fstree.KindDir {
		return fmt.Errorf("hardlink %s -> %s: target is a directory", hdr.Name, target)
	}
	return d.place(mapped, obj)
}

func (d *derivedLayer) place(mapped []string, obj *fstree.Inode) error {
	parent, err := d.parentDir(mapped)
	if err != nil {
		return err
	}
	parent.Entries[mapped[len(mapped)-1]] = obj
	d.added[strings.Join(mapped, "/")] = true
	return nil
}

// whiteout applies .wh.NAME (delete NAME) or .wh..wh..opq (hide everything
// lower layers put in the directory).
func (d *derivedLayer) whiteout(mapped []string) error {
	d.im.stats.Whiteouts++
	base := mapped[len(mapped)-1]
	dirPath := strings.Join(mapped[:len(mapped)-1], "/")
	dir, err := d.t.Lookup(dirPath)
	if err != nil || dir.Kind != fstree.KindDir {
		return nil // nothing below to hide
	}
	if base == ".wh..wh..opq" {
		for name := range dir.Entries {
			p := name
			if dirPath != "" {
				p = dirPath + "/" + name
			}
			if !d.added[p] {
				delete(dir.Entries, name)
			}
		}
		return nil
	}
	name := strings.TrimPrefix(base, ".wh.")
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("invalid whiteout %s", strings.Join(mapped, "/"))
	}
	delete(dir.Entries, name)
	return nil
}
