package fstree

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Store keeps file contents on disk, each named by its sha256, so equal
// contents are stored once. It is safe for concurrent use.
type Store struct {
	dir string
}

// OpenStore opens (creating it if needed) a content store in dir.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating content store %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path is where the content with the given digest is (or would be) stored.
func (s *Store) Path(digest string) string {
	hexsum := strings.TrimPrefix(digest, "sha256:")
	if len(hexsum) < 3 {
		return filepath.Join(s.dir, "invalid", hexsum)
	}
	return filepath.Join(s.dir, hexsum[:2], hexsum[2:])
}

// Put stores the data read from r and returns it as Content.
func (s *Store) Put(r io.Reader) (*StoredContent, error) {
	tmp, err := os.CreateTemp(s.dir, ".put-*")
	if err != nil {
		return nil, fmt.Errorf("creating temporary file in content store: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing content store object: %w", err)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	dst := s.Path(digest)
	if _, err := os.Stat(dst); err == nil {
		return &StoredContent{path: dst, size: n, digest: digest}, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, fmt.Errorf("creating content store directory: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, fmt.Errorf("storing %s: %w", digest, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return nil, fmt.Errorf("storing %s: %w", digest, err)
	}
	return &StoredContent{path: dst, size: n, digest: digest}, nil
}

// PutBytes stores b. The digest is known before anything is written, so
// the temporary file is created in the object's own shard directory
// (concurrent writers rarely contend for one directory) and nothing is
// written when the content is already stored.
func (s *Store) PutBytes(b []byte) (*StoredContent, error) {
	sum := sha256.Sum256(b)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	dst := s.Path(digest)
	n := int64(len(b))
	if st, err := os.Stat(dst); err == nil && st.Size() == n {
		return &StoredContent{path: dst, size: n, digest: digest}, nil
	}
	// Few syscalls per object: the shard directory is created only when
	// missing, permissions are set on the open file, and the temporary
	// name is removed only when the rename did not happen.
	dir := filepath.Dir(dst)
	tmp, err := os.CreateTemp(dir, ".put-*")
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating content store directory: %w", err)
		}
		tmp, err = os.CreateTemp(dir, ".put-*")
	}
	if err != nil {
		return nil, fmt.Errorf("creating temporary file in content store: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("storing %s: %w", digest, err)
	}
	return &StoredContent{path: dst, size: n, digest: digest}, nil
}

// Get returns the stored content with the given digest and size.
func (s *Store) Get(digest string, size int64) (*StoredContent, error) {
	p := s.Path(digest)
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("finding %s in content store %s: %w", digest, s.dir, err)
	}
	if st.Size() != size {
		return nil, fmt.Errorf("content store object %s has %d bytes, want %d", p, st.Size(), size)
	}
	return &StoredContent{path: p, size: size, digest: digest}, nil
}

// Resolve looks up content for Decode: stored content by digest, and the
// in-memory kinds this package defines.
func (s *Store) Resolve(digest string, size int64) (Content, error) {
	if strings.HasPrefix(digest, zeroDigestPrefix) {
		return ZeroContent(size), nil
	}
	return s.Get(digest, size)
}

// StoredContent is content kept in a Store.
type StoredContent = FileContent

// FileContent is data in a file on disk (in a Store, or referred to in place
// by FromDir); the file must not change while the tree is used.
type FileContent struct {
	path   string
	size   int64
	digest string
}

// Size implements Content.
func (c *FileContent) Size() int64 { return c.size }

// Digest implements Content.
func (c *FileContent) Digest() string { return c.digest }

// Path is the file holding the data; it must not be modified.
func (c *FileContent) Path() string { return c.path }

// Open implements Content.
func (c *FileContent) Open() (io.ReadCloser, error) { return os.Open(c.path) }

// BytesContent is content held in memory.
type BytesContent []byte

// Size implements Content.
func (b BytesContent) Size() int64 { return int64(len(b)) }

// Digest implements Content.
func (b BytesContent) Digest() string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Open implements Content.
func (b BytesContent) Open() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b)), nil
}

const zeroDigestPrefix = "zero:"

// ZeroContent is n zero bytes (a fully sparse file); it takes no space.
type ZeroContent int64

// Size implements Content.
func (z ZeroContent) Size() int64 { return int64(z) }

// Digest implements Content.
func (z ZeroContent) Digest() string { return fmt.Sprintf("%s%d", zeroDigestPrefix, int64(z)) }

// Open implements Content.
func (z ZeroContent) Open() (io.ReadCloser, error) {
	return io.NopCloser(io.LimitReader(zeroReader{}, int64(z))), nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
