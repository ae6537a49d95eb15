package publish

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// layout writes an OCI image layout: oci-layout, blobs/sha256/<hex>, index.json.
type layout struct {
	dir string
	// linkFiles lets putFile hard-link input files instead of copying them:
	// only for a throwaway layout, since tools edit ISOs in place
	// (coreos-installer iso ignition embed) and would change a kept blob.
	linkFiles bool
}

func openLayout(dir string) (*layout, error) {
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("creating OCI layout %s: %w", dir, err)
	}
	marker, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ocispec.ImageLayoutFile), marker, 0o644); err != nil {
		return nil, fmt.Errorf("creating OCI layout %s: %w", dir, err)
	}
	return &layout{dir: dir}, nil
}

func (l *layout) blobPath(d digest.Digest) string {
	return filepath.Join(l.dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// putBytes stores data as a blob.
func (l *layout) putBytes(mediaType string, data []byte) (ocispec.Descriptor, error) {
	d := digest.FromBytes(data)
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
	if _, err := os.Stat(l.blobPath(d)); err == nil {
		return desc, nil
	}
	if err := writeFileAtomic(l.blobPath(d), func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("writing blob %s: %w", d, err)
	}
	return desc, nil
}

// putJSON stores v encoded as compact JSON (struct fields in declaration
// order, map keys sorted: the same value gives the same digest).
func (l *layout) putJSON(mediaType string, v any) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("encoding %s: %w", mediaType, err)
	}
	return l.putBytes(mediaType, data)
}

// putFile stores the file at path as a blob, hard-linking it when allowed
// and possible (a live ISO is large) and copying otherwise.
func (l *layout) putFile(mediaType, path string) (ocispec.Descriptor, error) {
	f, err := os.Open(path)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("storing %s: %w", path, err)
	}
	defer f.Close()
	dg := digest.Canonical.Digester()
	n, err := io.Copy(dg.Hash(), f)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("storing %s: %w", path, err)
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: dg.Digest(), Size: n}
	dst := l.blobPath(desc.Digest)
	if _, err := os.Stat(dst); err == nil {
		return desc, nil
	}
	if l.linkFiles {
		if err := os.Link(path, dst); err == nil {
			return desc, nil
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("storing %s: %w", path, err)
	}
	check := digest.Canonical.Digester()
	err = writeFileAtomic(dst, func(w io.Writer) error {
		_, err := io.Copy(io.MultiWriter(w, check.Hash()), f)
		if err == nil && check.Digest() != desc.Digest {
			err = fmt.Errorf("%s changed while it was being stored", path)
		}
		return err
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("storing %s: %w", path, err)
	}
	return desc, nil
}

// putStream stores the bytes that write produces; it returns the blob's
// descriptor.
func (l *layout) putStream(mediaType string, write func(w io.Writer) error) (ocispec.Descriptor, error) {
	tmp, err := os.CreateTemp(filepath.Join(l.dir, "blobs"), ".blob*")
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("writing blob: %w", err)
	}
	defer os.Remove(tmp.Name())
	dg := digest.Canonical.Digester()
	cw := &countingWriter{w: io.MultiWriter(tmp, dg.Hash())}
	if err := write(cw); err != nil {
		tmp.Close()
		return ocispec.Descriptor{}, err
	}
	if err := tmp.Close(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("writing blob: %w", err)
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: dg.Digest(), Size: cw.n}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("writing blob: %w", err)
	}
	if err := os.Rename(tmp.Name(), l.blobPath(desc.Digest)); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("writing blob: %w", err)
	}
	return desc, nil
}

// tag points index.json's entry named tag at desc, replacing an entry of
// the same name and keeping others.
func (l *layout) tag(tag string, desc ocispec.Descriptor) error {
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	p := filepath.Join(l.dir, "index.json")
	if data, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(data, &idx); err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	kept := idx.Manifests[:0]
	for _, m := range idx.Manifests {
		if m.Annotations[ocispec.AnnotationRefName] != tag {
			kept = append(kept, m)
		}
	}
	desc.Annotations = map[string]string{ocispec.AnnotationRefName: tag}
	idx.Manifests = append(kept, desc)
	data, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	return writeFileAtomic(p, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// readJSON decodes the blob desc into v.
func (l *layout) readJSON(desc ocispec.Descriptor, v any) error {
	data, err := os.ReadFile(l.blobPath(desc.Digest))
	if err != nil {
		return fmt.Errorf("reading blob %s: %w", desc.Digest, err)
	}
	if digest.FromBytes(data) != desc.Digest {
		return fmt.Errorf("reading blob %s: content does not match its digest", desc.Digest)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding blob %s (%s): %w", desc.Digest, desc.MediaType, err)
	}
	return nil
}

// resolve returns the descriptor tagged tag in index.json.
func (l *layout) resolve(tag string) (ocispec.Descriptor, error) {
	p := filepath.Join(l.dir, "index.json")
	data, err := os.ReadFile(p)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("reading OCI layout index: %w", err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("decoding %s: %w", p, err)
	}
	for _, m := range idx.Manifests {
		if m.Annotations[ocispec.AnnotationRefName] == tag {
			return m, nil
		}
	}
	if len(idx.Manifests) == 1 && tag == "" {
		return idx.Manifests[0], nil
	}
	return ocispec.Descriptor{}, fmt.Errorf("OCI layout %s has no image tagged %q", l.dir, tag)
}

// copyBlobFrom makes blob desc of src available in l (hard link or copy).
func (l *layout) copyBlobFrom(src *layout, desc ocispec.Descriptor) error {
	dst := l.blobPath(desc.Digest)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	from := src.blobPath(desc.Digest)
	if err := os.Link(from, dst); err == nil {
		return nil
	}
	f, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("copying blob %s: %w", desc.Digest, err)
	}
	defer f.Close()
	return writeFileAtomic(dst, func(w io.Writer) error { _, err := io.Copy(w, f); return err })
}

func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
