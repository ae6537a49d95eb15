package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	imgspecs "github.com/opencontainers/image-spec/specs-go"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"
)

// Annotations on index.json entries of the blob cache.
const (
	annotationSource       = "io.github.okd-project.scos-builder.source"
	annotationSourceDigest = "io.github.okd-project.scos-builder.source-digest"
	annotationPlatform     = "io.github.okd-project.scos-builder.platform"
)

// blobCache is an OCI image layout used as a content-addressed blob store.
type blobCache struct{ dir string }

func openBlobCache(dir string) (*blobCache, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening blob cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, "blobs"), 0o755); err != nil {
		return nil, fmt.Errorf("creating blob cache %s: %w", abs, err)
	}
	layoutFile := filepath.Join(abs, imgspecv1.ImageLayoutFile)
	if _, err := os.Stat(layoutFile); errors.Is(err, os.ErrNotExist) {
		b, _ := json.Marshal(imgspecv1.ImageLayout{Version: imgspecv1.ImageLayoutVersion})
		if err := writeFileAtomic(layoutFile, b); err != nil {
			return nil, fmt.Errorf("creating blob cache %s: %w", abs, err)
		}
	}
	return &blobCache{dir: abs}, nil
}

func (b *blobCache) blobPath(d digest.Digest) string {
	return filepath.Join(b.dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// has reports whether a verified blob with digest d (and size, when
// known) is in the cache.
func (b *blobCache) has(d digest.Digest, size int64) bool {
	st, err := os.Stat(b.blobPath(d))
	return err == nil && st.Mode().IsRegular() && (size < 0 || st.Size() == size)
}

// write stores r as blob d, refusing content whose digest (or size, when
// known) does not match. onWrite is called with the bytes written so far.
func (b *blobCache) write(d digest.Digest, size int64, r io.Reader, onWrite func(int64)) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("invalid digest %q: %w", d, err)
	}
	dst := b.blobPath(d)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".partial-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	verifier := d.Verifier()
	w := &countingWriter{w: io.MultiWriter(tmp, verifier), onWrite: onWrite}
	n, err := io.Copy(w, r)
	if err != nil {
		return err
	}
	if size >= 0 && n != size {
		return fmt.Errorf("blob %s: got %d bytes, expected %d: refusing it", d, n, size)
	}
	if !verifier.Verified() {
		return fmt.Errorf("blob %s: content does not match its digest: refusing it", d)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

type countingWriter struct {
	w       io.Writer
	n       int64
	last    time.Time
	onWrite func(int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.onWrite != nil && time.Since(c.last) > 200*time.Millisecond {
		c.last = time.Now()
		c.onWrite(c.n)
	}
	return n, err
}

// lock takes an exclusive lock on the cache's index (released by the
// returned function); it serialises index.json updates between processes.
func (b *blobCache) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(b.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking blob cache %s: %w", b.dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking blob cache %s: %w", b.dir, err)
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

func (b *blobCache) readIndex() (imgspecv1.Index, error) {
	idx := imgspecv1.Index{Versioned: imgspecs.Versioned{SchemaVersion: 2}, MediaType: imgspecv1.MediaTypeImageIndex}
	data, err := os.ReadFile(filepath.Join(b.dir, imgspecv1.ImageIndexFile))
	if errors.Is(err, os.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return idx, fmt.Errorf("parsing %s: %w", filepath.Join(b.dir, imgspecv1.ImageIndexFile), err)
	}
	return idx, nil
}

// lookup finds the manifest cached for source ref at platform whose
// top-level manifest had digest topDigest.
func (b *blobCache) lookup(source string, topDigest digest.Digest, plat string) (imgspecv1.Descriptor, bool) {
	idx, err := b.readIndex()
	if err != nil {
		return imgspecv1.Descriptor{}, false
	}
	for _, m := range idx.Manifests {
		a := m.Annotations
		if a[annotationSource] == source && a[annotationSourceDigest] == topDigest.String() && a[annotationPlatform] == plat {
			return m, true
		}
	}
	return imgspecv1.Descriptor{}, false
}

// record adds (or replaces) the index.json entry for source at platform.
func (b *blobCache) record(desc imgspecv1.Descriptor) error {
	unlock, err := b.lock()
	if err != nil {
		return err
	}
	defer unlock()
	idx, err := b.readIndex()
	if err != nil {
		return err
	}
	keep := idx.Manifests[:0]
	for _, m := range idx.Manifests {
		if m.Annotations[annotationSource] == desc.Annotations[annotationSource] &&
			m.Annotations[annotationPlatform] == desc.Annotations[annotationPlatform] {
			continue
		}
		keep = append(keep, m)
	}
	idx.Manifests = append(keep, desc)
	sort.SliceStable(idx.Manifests, func(i, j int) bool {
		ai, aj := idx.Manifests[i].Annotations, idx.Manifests[j].Annotations
		if ai[annotationSource] != aj[annotationSource] {
			return ai[annotationSource] < aj[annotationSource]
		}
		return ai[annotationPlatform] < aj[annotationPlatform]
	})
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(b.dir, imgspecv1.ImageIndexFile), data)
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// fetchBlob makes sure blob info of image o is in the cache and returns
// its path. A blob already cached is not fetched again; a transfer that
// fails transiently is retried from the start.
func (c *Client) fetchBlob(ctx context.Context, o *opened, info types.BlobInfo, what string, rep Reporter) (string, error) {
	if c.cache.has(info.Digest, info.Size) {
		if rep != nil {
			rep.Message("Copying %s %s skipped: already exists", what, info.Digest.Encoded()[:12])
		}
		return c.cache.blobPath(info.Digest), nil
	}
	msg := fmt.Sprintf("Copying %s %s", what, info.Digest.Encoded()[:min(12, len(info.Digest.Encoded()))])
	err := c.retry(ctx, msg, func() error {
		rc, size, err := c.getBlob(ctx, o, info)
		if err != nil {
			return err
		}
		defer rc.Close()
		if info.Size < 0 && size >= 0 {
			info.Size = size
		}
		var onWrite func(int64)
		if rep != nil {
			total := max(info.Size, 0)
			rep.Progress(msg, 0, total)
			onWrite = func(n int64) { rep.Progress(msg, n, total) }
		}
		if err := c.cache.write(info.Digest, info.Size, &ctxReader{ctx: ctx, r: rc}, onWrite); err != nil {
			return err
		}
		if rep != nil {
			rep.Progress(msg, max(info.Size, 0), max(info.Size, 0))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("fetching %s %s of %s: %w", what, info.Digest, refString(o.ref), err)
	}
	return c.cache.blobPath(info.Digest), nil
}

// ctxReader stops a blob transfer when the context is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
