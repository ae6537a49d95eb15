package ostree

import (
	"archive/tar"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/gvariant"
)

// Image labels and metadata keys of the ostree container format.
const (
	LabelCommit      = "ostree.commit"
	LabelFinalDiffID = "ostree.final-diffid"
	LabelBootable    = "ostree.bootable"
	LabelBootc       = "containers.bootc"
	LabelLinux       = "ostree.linux"

	MetaManifestDigest = "ostree.manifest-digest"
	MetaManifest       = "ostree.manifest"
	MetaImageConfig    = "ostree.container.image-config"
	MetaImporter       = "ostree.importer.version"
	MetaTarFiltered    = "ostree.tar-filtered"

	RefBlobPrefix  = "ostree/container/blob/"
	RefImagePrefix = "ostree/container/image/"

	// ImporterVersion is written as ostree.importer.version.
	ImporterVersion = "scos-builder-ostree/1"

	repoPrefix      = "sysroot/ostree/repo/"
	maxMetaObject   = 10 << 20
	maxXattrsObject = 1 << 20
)

// Image is an ostree container image to import.
type Image struct {
	// Ref is the ostree image reference the merge commit's ref is named
	// after, e.g. "ostree-unverified-registry:quay.io/fedora/fedora-coreos:stable"
	// (a plain registry reference gets the ostree-unverified-registry:
	// transport). Empty: no image ref is written.
	Ref string
	// Manifest and Config are the raw JSON of the image manifest and config.
	Manifest []byte
	Config   []byte
	// Layers in manifest order.
	Layers []Layer
}

// ImportStats counts what an import did.
type ImportStats struct {
	OstreeLayers    int
	DerivedLayers   int
	ContentObjects  int   // content objects in the repository
	ContentBytes    int64 // total size of the regular files among them
	MetaObjects     int   // commit, dirtree, dirmeta and commitmeta objects
	NewObjects      int   // objects written for the merge commit (derived content, dirtrees, dirmetas, commit)
	DerivedEntries  int   // tar entries applied from derived layers
	Whiteouts       int   // whiteouts and opaque markers applied
	InheritedLabels int   // derived files and directories that got their parent directory's SELinux label
	// Filtered counts derived-layer entries dropped, by layer digest and top-level directory.
	Filtered map[string]map[string]uint32
}

// ImportResult is an imported ostree container image: the objects of a
// bare repository and the merge commit's filesystem. Root's regular files
// and symlinks are the same inodes as Repo's content objects, so a
// checkout made from them is a hardlink checkout.
type ImportResult struct {
	// Commit is the merge commit (what gets deployed).
	Commit string
	// BaseCommit is the image's ostree commit (label ostree.commit).
	BaseCommit string
	// Repo is the repository directory (config with mode=bare, objects,
	// refs ostree/container/blob/… and ostree/container/image/…).
	Repo *fstree.Tree
	// Root is the merge commit's filesystem (usr, usr/etc, …).
	Root *fstree.Tree
	// Labels are the image config labels.
	Labels map[string]string
	// ImageRef is the ostree image reference (see Image.Ref).
	ImageRef       string
	ManifestDigest string
	ConfigDigest   string
	// Timestamp is the merge commit's timestamp (the image's creation time).
	Timestamp int64
	// Refs maps ref names to commits.
	Refs  map[string]string
	Stats ImportStats
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	Created      string `json:"created"`
	Config       struct {
		Labels map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type imageManifest struct {
	Annotations map[string]string `json:"annotations"`
}

// NotOstreeImageError says the image is not a bootable ostree container.
type NotOstreeImageError struct{ Reason string }

func (e *NotOstreeImageError) Error() string {
	return "not an ostree container image: " + e.Reason + "; pass a bootable ostree/bootc container image " +
		"(the OS image of a release payload, e.g. its stream-coreos or rhel-coreos tag, or " +
		"quay.io/fedora/fedora-coreos:stable) or an image derived FROM one, not a release payload or an ordinary container image"
}

// ContainerImageRef returns ref as an ostree container image reference:
// refs with an ostree-* transport are kept, others get
// ostree-unverified-registry:.
func ContainerImageRef(ref string) string {
	if ref == "" || strings.HasPrefix(ref, "ostree-") {
		return ref
	}
	ref = strings.TrimPrefix(ref, "docker://")
	return "ostree-unverified-registry:" + ref
}

// importer holds the objects read so far.
type importer struct {
	store     *fstree.Store
	log       io.Writer
	objects   map[string]*fstree.Inode // content checksum → object inode
	objSum    map[*fstree.Inode]string // object inode → content checksum
	meta      map[string][]byte        // "<checksum>.<type>" → object bytes
	metaOrder []string                 // insertion order, for deterministic output
	origMeta  map[*fstree.Inode]string // directory → its unchanged dirmeta checksum
	// xattrsByPath holds the xattr sets read so far by tar path (.file-xattrs
	// and v0 xattrs/ entries), for the references that follow them.
	xattrsByPath map[string][]fstree.Xattr
	// derived marks content objects made from derived layers; those the
	// merge commit does not use (replaced or whited out later) are dropped.
	derived map[string]bool
	commit  string
	stats   ImportStats
}

// Import reads an ostree container image layer by layer and returns its
// repository objects and merge commit. File contents go to store; nothing
// is unpacked to disk, and memory stays bounded: large files stream into
// the store, small ones (≤ 1 MiB) are held only while a few workers write
// them. Every object's checksum is recomputed and compared. Progress
// lines go to log.
func Import(ctx context.Context, img Image, store *fstree.Store, log io.Writer) (*ImportResult, error) {
	if log == nil {
		log = io.Discard
	}
	var cfg imageConfig
	if err := json.Unmarshal(img.Config, &cfg); err != nil {
		return nil, fmt.Errorf("parsing image config: %w", err)
	}
	var man imageManifest
	if len(img.Manifest) == 0 {
		return nil, errors.New("importing image: no manifest (its exact bytes name the merge commit's ostree.manifest-digest)")
	}
	if err := json.Unmarshal(img.Manifest, &man); err != nil {
		return nil, fmt.Errorf("parsing image manifest: %w", err)
	}
	labels := cfg.Config.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	final, ok := labels[LabelFinalDiffID]
	if !ok {
		return nil, &NotOstreeImageError{Reason: "label " + LabelFinalDiffID + " is missing"}
	}
	_, bootable := labels[LabelBootable]
	_, bootc := labels[LabelBootc]
	if !bootable && !bootc {
		return nil, &NotOstreeImageError{Reason: "neither label " + LabelBootable + " nor " + LabelBootc + " is set (the image is not bootable)"}
	}
	if len(img.Layers) == 0 {
		return nil, errors.New("importing image: missing commit layer: the image has no layers")
	}
	if len(cfg.RootFS.DiffIDs) != 0 && len(cfg.RootFS.DiffIDs) != len(img.Layers) {
		return nil, fmt.Errorf("importing image: config lists %d diff_ids for %d layers", len(cfg.RootFS.DiffIDs), len(img.Layers))
	}
	k := -1
	for i, d := range cfg.RootFS.DiffIDs {
		if d == final {
			k = i
			break
		}
	}
	if k < 0 {
		return nil, &NotOstreeImageError{Reason: fmt.Sprintf("label %s=%s names no layer in rootfs.diff_ids", LabelFinalDiffID, final)}
	}
	diffID := func(i int) string {
		if img.Layers[i].DiffID != "" {
			return img.Layers[i].DiffID
		}
		return cfg.RootFS.DiffIDs[i]
	}

	im := &importer{store: store, log: log, objects: map[string]*fstree.Inode{}, objSum: map[*fstree.Inode]string{},
		meta: map[string][]byte{}, origMeta: map[*fstree.Inode]string{}, xattrsByPath: map[string][]fstree.Xattr{}, derived: map[string]bool{}}
	im.stats.Filtered = map[string]map[string]uint32{}
	start := time.Now()
	for i := 0; i <= k; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := im.importOstreeLayer(ctx, img.Layers[i], i, diffID(i)); err != nil {
			return nil, fmt.Errorf("importing image: %w", err)
		}
		im.stats.OstreeLayers++
	}
	if im.commit == "" {
		return nil, fmt.Errorf("importing image: missing commit layer: layer 0 (%s) holds no .commit object", img.Layers[0].name())
	}
	if want, ok := labels[LabelCommit]; ok && want != im.commit {
		return nil, fmt.Errorf("importing image: commit layer holds commit %s but label %s is %s", im.commit, LabelCommit, want)
	}
	fmt.Fprintf(log, "imported %d ostree layer(s): commit %s, %d content objects (%d bytes), %d metadata objects in %s\n",
		k+1, im.commit, len(im.objects), im.stats.ContentBytes, len(im.meta), time.Since(start).Round(time.Millisecond))

	base, err := DecodeCommit(im.meta[im.commit+"."+ObjCommit])
	if err != nil {
		return nil, fmt.Errorf("importing image: commit %s: %w", im.commit, err)
	}
	root, err := im.buildDir(base.RootTree, base.RootMeta, "/", 0)
	if err != nil {
		return nil, fmt.Errorf("importing image: reading commit %s: %w", im.commit, err)
	}
	tree := &fstree.Tree{Root: root}

	for i := k + 1; i < len(img.Layers); i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := im.applyDerivedLayer(ctx, tree, img.Layers[i], diffID(i)); err != nil {
			return nil, fmt.Errorf("importing image: %w", err)
		}
		im.stats.DerivedLayers++
	}
	if im.stats.DerivedLayers > 0 {
		fmt.Fprintf(log, "applied %d derived layer(s): %d entries, %d whiteouts; %d new entries got their parent directory's SELinux label\n",
			im.stats.DerivedLayers, im.stats.DerivedEntries, im.stats.Whiteouts, im.stats.InheritedLabels)
		for _, l := range sortedKeys(im.stats.Filtered) {
			for _, top := range sortedKeys(im.stats.Filtered[l]) {
				fmt.Fprintf(log, "derived layer %s: dropped %d entries under /%s (only /usr, /etc and /var are kept)\n",
					l, im.stats.Filtered[l][top], top)
			}
		}
	}
	cleanupRoot(tree)

	metaBefore := len(im.meta)
	treeSum, metaSum, err := im.writeDir(tree.Root, "/")
	if err != nil {
		return nil, fmt.Errorf("writing merge commit: %w", err)
	}
	manifestDigest := "sha256:" + sha256Hex(img.Manifest)
	md := Metadata{
		{Key: MetaImageConfig, Value: gvariant.Variant{Type: "s", Value: string(img.Config)}},
		{Key: MetaImporter, Value: gvariant.Variant{Type: "s", Value: ImporterVersion}},
		{Key: MetaManifest, Value: gvariant.Variant{Type: "s", Value: string(img.Manifest)}},
		{Key: MetaManifestDigest, Value: gvariant.Variant{Type: "s", Value: manifestDigest}},
	}
	if len(im.stats.Filtered) > 0 {
		var outer []any
		for _, l := range sortedKeys(im.stats.Filtered) {
			var inner []any
			for _, top := range sortedKeys(im.stats.Filtered[l]) {
				inner = append(inner, []any{top, im.stats.Filtered[l][top]})
			}
			outer = append(outer, []any{l, inner})
		}
		md = append(md, MetaItem{Key: MetaTarFiltered, Value: gvariant.Variant{Type: "a{sa{su}}", Value: outer}})
	}
	created := man.Annotations["org.opencontainers.image.created"]
	if created == "" {
		created = cfg.Created
	}
	var ts uint64
	if created != "" {
		t, err := time.Parse(time.RFC3339Nano, created)
		if err != nil {
			return nil, fmt.Errorf("importing image: parsing creation time %q: %w", created, err)
		}
		if t.Unix() > 0 {
			ts = uint64(t.Unix())
		}
	}
	mc := Commit{Metadata: md, Timestamp: ts, RootTree: treeSum, RootMeta: metaSum}
	mb, err := mc.Encode()
	if err != nil {
		return nil, fmt.Errorf("writing merge commit: %w", err)
	}
	merge := sha256Hex(mb)
	im.addMeta(merge, ObjCommit, mb)
	im.stats.NewObjects += len(im.meta) - metaBefore

	res := &ImportResult{
		Commit: merge, BaseCommit: im.commit, Root: tree, Labels: labels,
		ImageRef: ContainerImageRef(img.Ref), ManifestDigest: manifestDigest,
		ConfigDigest: "sha256:" + sha256Hex(img.Config), Timestamp: int64(ts),
		Refs: map[string]string{RefBlobPrefix + EscapeRef(img.Layers[0].name()): im.commit},
	}
	if res.ImageRef != "" {
		res.Refs[RefImagePrefix+EscapeRef(res.ImageRef)] = merge
	}
	im.dropUnusedDerived(tree)
	im.stats.ContentObjects = len(im.objects)
	im.stats.MetaObjects = len(im.meta)
	res.Stats = im.stats
	if res.Repo, err = im.repoTree(res.Refs); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "merge commit %s (base %s): %d content objects, %d metadata objects, %d new\n",
		merge, im.commit, len(im.objects), len(im.meta), im.stats.NewObjects)
	return res, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (im *importer) addMeta(checksum, typ string, b []byte) {
	key := checksum + "." + typ
	if _, ok := im.meta[key]; ok {
		return
	}
	im.meta[key] = b
	im.metaOrder = append(im.metaOrder, key)
}

// xattrRef is the xattrs bound to the next .file object.
type xattrRef struct {
	checksum string
	xattrs   []fstree.Xattr
}

// importOstreeLayer reads the repository objects of an ostree layer
// (commit layer or chunk layer); the hardlinked checkout is ignored.
func (im *importer) importOstreeLayer(ctx context.Context, l Layer, index int, diffID string) error {
	lr, err := openLayer(l)
	if err != nil {
		return err
	}
	defer lr.Close()
	sw := newStoreWriter(im.store)
	defer sw.wait()
	xattrsByPath := im.xattrsByPath
	var pending *xattrRef
	nobj := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading layer %s: %w", l.name(), err)
		}
		name := normalizeTarName(hdr.Name)
		if !strings.HasPrefix(name, repoPrefix) {
			continue
		}
		rel := name[len(repoPrefix):]
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		if strings.HasPrefix(rel, "xattrs/") {
			// Format v0: xattrs stored once, named by their sha256.
			if !isRegular(hdr) {
				continue
			}
			xs, err := readXattrsObject(lr, hdr, strings.TrimPrefix(rel, "xattrs/"))
			if err != nil {
				return fmt.Errorf("layer %s: %s: %w", l.name(), name, err)
			}
			xattrsByPath[name] = xs
			continue
		}
		if !strings.HasPrefix(rel, "objects/") {
			continue // config, refs, state, …
		}
		checksum, typ, err := parseObjectPath(rel)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.name(), err)
		}
		switch typ {
		case ObjCommit, ObjCommitMeta, ObjDirTree, ObjDirMeta:
			if typ == ObjCommit && (index != 0 || nobj != 0) {
				return fmt.Errorf("layer %s: commit object %s is not the first object of the commit layer", l.name(), checksum)
			}
			if typ == ObjCommitMeta && nobj != 1 {
				return fmt.Errorf("layer %s: commitmeta object %s does not follow the commit", l.name(), checksum)
			}
			nobj++
			b, err := readSmall(lr, hdr, maxMetaObject)
			if err != nil {
				return fmt.Errorf("layer %s: reading %s object %s: %w", l.name(), typ, checksum, err)
			}
			if typ != ObjCommitMeta {
				if got := sha256Hex(b); got != checksum {
					return fmt.Errorf("layer %s: %s object %s: checksum mismatch: content hashes to %s", l.name(), typ, checksum, got)
				}
			}
			if typ == ObjCommit {
				im.commit = checksum
			}
			im.addMeta(checksum, typ, b)
		case "file-xattrs":
			nobj++
			xs, err := readXattrsObject(lr, hdr, checksum)
			if err != nil {
				return fmt.Errorf("layer %s: %s: %w", l.name(), name, err)
			}
			xattrsByPath[name] = xs
		case "file-xattrs-link", "file.xattrs":
			nobj++
			var xs []fstree.Xattr
			switch {
			case hdr.Typeflag == tar.TypeLink:
				target := normalizeTarName(hdr.Linkname)
				var ok bool
				if xs, ok = xattrsByPath[target]; !ok {
					return fmt.Errorf("layer %s: xattrs reference of object %s points to %s, which the layer does not hold before it", l.name(), checksum, target)
				}
			case isRegular(hdr) && typ == "file-xattrs-link":
				b, err := readSmall(lr, hdr, maxXattrsObject)
				if err != nil {
					return fmt.Errorf("layer %s: %s: %w", l.name(), name, err)
				}
				if xs, err = DecodeXattrs(b); err != nil {
					return fmt.Errorf("layer %s: %s: %w", l.name(), name, err)
				}
			default:
				return fmt.Errorf("layer %s: xattrs reference %s is a %c entry, want a hardlink", l.name(), name, hdr.Typeflag)
			}
			pending = &xattrRef{checksum: checksum, xattrs: xs}
		case ObjFile:
			nobj++
			if pending == nil || pending.checksum != checksum {
				return fmt.Errorf("layer %s: missing xattrs reference for content object %s", l.name(), checksum)
			}
			xs := pending.xattrs
			pending = nil
			if _, ok := im.objects[checksum]; ok {
				continue
			}
			ino, err := im.readContentObject(lr, hdr, checksum, xs, sw)
			if err != nil {
				return fmt.Errorf("layer %s: content object %s: %w", l.name(), checksum, err)
			}
			im.objects[checksum] = ino
			im.objSum[ino] = checksum
			if ino.Kind == fstree.KindRegular {
				im.stats.ContentBytes += hdr.Size
			}
		default:
			return fmt.Errorf("layer %s: unknown object type %q in %s", l.name(), typ, name)
		}
	}
	if err := sw.wait(); err != nil {
		return fmt.Errorf("layer %s: %w", l.name(), err)
	}
	return lr.finish(l, diffID)
}

func isRegular(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA
}

func normalizeTarName(n string) string {
	for {
		switch {
		case strings.HasPrefix(n, "./"):
			n = n[2:]
		case strings.HasPrefix(n, "/"):
			n = n[1:]
		default:
			return n
		}
	}
}

// parseObjectPath splits objects/XX/<62 hex>.<type>.
func parseObjectPath(rel string) (string, string, error) {
	parts := strings.Split(rel, "/")
	if len(parts) != 3 || len(parts[1]) != 2 {
		return "", "", fmt.Errorf("malformed object path %q", rel)
	}
	rest, typ, ok := strings.Cut(parts[2], ".")
	sum := parts[1] + rest
	if !ok || !ValidChecksum(sum) {
		return "", "", fmt.Errorf("malformed object path %q", rel)
	}
	return sum, typ, nil
}

func readSmall(r io.Reader, hdr *tar.Header, limit int64) ([]byte, error) {
	if !isRegular(hdr) {
		return nil, fmt.Errorf("entry is type %c, want a regular file", hdr.Typeflag)
	}
	if hdr.Size > limit {
		return nil, fmt.Errorf("%d bytes exceeds the limit of %d", hdr.Size, limit)
	}
	b := make([]byte, hdr.Size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func readXattrsObject(r io.Reader, hdr *tar.Header, name string) ([]fstree.Xattr, error) {
	b, err := readSmall(r, hdr, maxXattrsObject)
	if err != nil {
		return nil, err
	}
	if got := sha256Hex(b); got != name {
		return nil, fmt.Errorf("xattrs checksum mismatch: content hashes to %s", got)
	}
	return DecodeXattrs(b)
}

// readContentObject stores a .file entry's data and checks its checksum.
func (im *importer) readContentObject(r io.Reader, hdr *tar.Header, checksum string, xs []fstree.Xattr, sw *storeWriter) (*fstree.Inode, error) {
	mode := uint32(hdr.Mode) & 0o7777
	ino := &fstree.Inode{Mode: mode, UID: uint32(hdr.Uid), GID: uint32(hdr.Gid)}
	for _, x := range xs {
		ino.SetXattr(x.Name, x.Value)
	}
	switch {
	case isRegular(hdr):
		ino.Kind = fstree.KindRegular
		h, err := NewContentHash(ino.UID, ino.GID, sIFREG|mode, "", xs)
		if err != nil {
			return nil, err
		}
		switch {
		case hdr.Size > 0 && hdr.Size <= parallelMax:
			buf := bufPool.Get().(*[]byte)
			data := (*buf)[:hdr.Size]
			if _, err := io.ReadFull(r, data); err != nil {
				bufPool.Put(buf)
				return nil, err
			}
			h.Write(data)
			if got := hex.EncodeToString(h.Sum(nil)); got != checksum {
				bufPool.Put(buf)
				return nil, fmt.Errorf("checksum mismatch: content hashes to %s", got)
			}
			sw.submit(storeJob{ino: ino, checksum: checksum, buf: buf, size: int(hdr.Size)})
			return ino, nil
		case hdr.Size > 0:
			c, err := im.store.Put(io.TeeReader(r, h))
			if err != nil {
				return nil, err
			}
			ino.Content = c
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != checksum {
			return nil, fmt.Errorf("checksum mismatch: content hashes to %s", got)
		}
	case hdr.Typeflag == tar.TypeSymlink:
		ino.Kind = fstree.KindSymlink
		ino.Target = hdr.Linkname
		h, err := NewContentHash(ino.UID, ino.GID, sIFLNK|mode, hdr.Linkname, xs)
		if err != nil {
			return nil, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != checksum {
			return nil, fmt.Errorf("checksum mismatch: content hashes to %s", got)
		}
	default:
		return nil, fmt.Errorf("entry is type %c, want a regular file or symlink", hdr.Typeflag)
	}
	return ino, nil
}

// buildDir turns a dirtree/dirmeta pair into a directory of the tree.
func (im *importer) buildDir(treeSum, metaSum, p string, depth int) (*fstree.Inode, error) {
	if depth > 256 {
		return nil, fmt.Errorf("%s: directory nesting too deep", p)
	}
	mb, ok := im.meta[metaSum+"."+ObjDirMeta]
	if !ok {
		return nil, fmt.Errorf("dirmeta object %s of %s is missing from the image layers", metaSum, p)
	}
	dm, err := DecodeDirMeta(mb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	tb, ok := im.meta[treeSum+"."+ObjDirTree]
	if !ok {
		return nil, fmt.Errorf("dirtree object %s of %s is missing from the image layers", treeSum, p)
	}
	dt, err := DecodeDirTree(tb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	dir := fstree.NewDir(dm.Mode&0o7777, dm.UID, dm.GID)
	for _, x := range dm.Xattrs {
		dir.SetXattr(x.Name, x.Value)
	}
	im.origMeta[dir] = metaSum
	for _, f := range dt.Files {
		obj, ok := im.objects[f.Checksum]
		if !ok {
			return nil, fmt.Errorf("content object %s of %s is missing from the image layers", f.Checksum, joinPath(p, f.Name))
		}
		dir.Entries[f.Name] = obj
	}
	for _, d := range dt.Dirs {
		if _, dup := dir.Entries[d.Name]; dup {
			return nil, fmt.Errorf("%s: dirtree lists %q twice", p, d.Name)
		}
		sub, err := im.buildDir(d.TreeChecksum, d.MetaChecksum, joinPath(p, d.Name), depth+1)
		if err != nil {
			return nil, err
		}
		dir.Entries[d.Name] = sub
	}
	return dir, nil
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// writeDir computes (and adds, when new) the dirtree and dirmeta objects
// of dir and everything below it.
func (im *importer) writeDir(dir *fstree.Inode, p string) (string, string, error) {
	var dt DirTree
	for _, name := range dir.SortedNames() {
		child := dir.Entries[name]
		switch child.Kind {
		case fstree.KindDir:
			ts, ms, err := im.writeDir(child, joinPath(p, name))
			if err != nil {
				return "", "", err
			}
			dt.Dirs = append(dt.Dirs, TreeDir{Name: name, TreeChecksum: ts, MetaChecksum: ms})
		case fstree.KindRegular, fstree.KindSymlink:
			sum, ok := im.objSum[child]
			if !ok {
				return "", "", fmt.Errorf("%s has no content object", joinPath(p, name))
			}
			dt.Files = append(dt.Files, TreeFile{Name: name, Checksum: sum})
		default:
			return "", "", fmt.Errorf("%s is a %s, which an ostree commit cannot hold", joinPath(p, name), child.Kind)
		}
	}
	tb, err := dt.Encode()
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", p, err)
	}
	treeSum := sha256Hex(tb)
	im.addMeta(treeSum, ObjDirTree, tb)
	metaSum, ok := im.origMeta[dir]
	if !ok {
		mb, err := DirMeta{UID: dir.UID, GID: dir.GID, Mode: sIFDIR | dir.Mode&0o7777, Xattrs: dir.Xattrs}.Encode()
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", p, err)
		}
		metaSum = sha256Hex(mb)
		im.addMeta(metaSum, ObjDirMeta, mb)
	}
	return treeSum, metaSum, nil
}

// cleanupRoot removes what ostree-ext's cleanup_root removes: empty
// usr/etc/hostname and usr/etc/resolv.conf left by container builds.
func cleanupRoot(t *fstree.Tree) {
	for _, p := range []string{"usr/etc/hostname", "usr/etc/resolv.conf"} {
		if ino, err := t.Lookup(p); err == nil && ino.Kind == fstree.KindRegular && ino.Size() == 0 {
			_ = t.Remove(p)
		}
	}
}

// dropUnusedDerived forgets derived-layer objects the merge commit does
// not reference, so the repository holds only reachable objects.
func (im *importer) dropUnusedDerived(t *fstree.Tree) {
	if len(im.derived) == 0 {
		return
	}
	used := map[*fstree.Inode]bool{}
	_ = t.Walk(func(_ string, ino *fstree.Inode) error {
		used[ino] = true
		return nil
	})
	for sum := range im.derived {
		if ino := im.objects[sum]; !used[ino] {
			if ino.Kind == fstree.KindRegular {
				im.stats.ContentBytes -= ino.Size()
			}
			delete(im.objects, sum)
			delete(im.objSum, ino)
		}
	}
}

// repoTree lays out the bare repository: objects, refs and config.
func (im *importer) repoTree(refs map[string]string) (*fstree.Tree, error) {
	t := fstree.New()
	for _, d := range []string{"extensions", "objects", "refs/heads", "refs/mirrors", "refs/remotes", "state", "tmp/cache"} {
		if _, err := t.MkdirAll(d, 0o755, 0, 0); err != nil {
			return nil, err
		}
	}
	if err := im.addFile(t, "config", []byte(RepoConfig)); err != nil {
		return nil, err
	}
	for _, key := range im.metaOrder {
		sum, typ, _ := strings.Cut(key, ".")
		if err := im.addFile(t, ObjectPath(sum, typ), im.meta[key]); err != nil {
			return nil, err
		}
	}
	for sum, ino := range im.objects {
		p := ObjectPath(sum, ObjFile)
		if _, err := t.MkdirAll(p[:len("objects/XX")], 0o755, 0, 0); err != nil {
			return nil, err
		}
		if err := t.Add(p, ino); err != nil {
			return nil, err
		}
	}
	for ref, sum := range refs {
		if err := addRef(t, im.store, ref, sum); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// RepoConfig is the config of the bare repository (no readonly=true:
// the live system must be able to write to it).
const RepoConfig = "[core]\nrepo_version=1\nmode=bare\n"

func (im *importer) addFile(t *fstree.Tree, p string, b []byte) error {
	return putFile(t, im.store, p, b, 0o644)
}

func putFile(t *fstree.Tree, store *fstree.Store, p string, b []byte, mode uint32) error {
	if i := strings.LastIndex(p, "/"); i > 0 {
		if _, err := t.MkdirAll(p[:i], 0o755, 0, 0); err != nil {
			return err
		}
	}
	ino := &fstree.Inode{Kind: fstree.KindRegular, Mode: mode}
	if len(b) > 0 {
		c, err := store.PutBytes(b)
		if err != nil {
			return err
		}
		ino.Content = c
	}
	return t.Add(p, ino)
}

func addRef(t *fstree.Tree, store *fstree.Store, ref, sum string) error {
	return putFile(t, store, "refs/heads/"+ref, []byte(sum+"\n"), 0o644)
}
