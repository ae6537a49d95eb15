package builder

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Output is one file to publish: Path (in the store) becomes Name in the
// output directory.
type Output struct {
	Name string
	Path string
}

// PublishOutputs copies the outputs into dir so that dir never holds a
// partial file: everything is first copied into a hidden temporary
// directory inside dir, then renamed into place. Outputs are copies, not
// hardlinks, because users edit them in place (iso ignition embed) and the
// store must stay intact. A file that an earlier publish of the same store
// object left in dir untouched is kept instead of copied again (see
// publishedTag), so a warm rebuild does not rewrite gigabytes. It returns
// the published paths in order.
func PublishOutputs(dir string, outputs []Output) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating output directory: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".scos-builder-publish-")
	if err != nil {
		return nil, fmt.Errorf("creating temporary directory in %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	fresh := map[string]bool{}
	for _, o := range outputs {
		if o.Name == "" || filepath.Base(o.Name) != o.Name {
			return nil, fmt.Errorf("publishing %s: output name must be a plain file name", o.Name)
		}
		if isPublished(o.Path, filepath.Join(dir, o.Name)) {
			continue
		}
		staged := filepath.Join(tmp, o.Name)
		if err := copyFile(o.Path, staged); err != nil {
			return nil, fmt.Errorf("publishing %s: %w", o.Name, err)
		}
		markPublished(o.Path, staged)
		fresh[o.Name] = true
	}
	paths := make([]string, 0, len(outputs))
	for _, o := range outputs {
		dst := filepath.Join(dir, o.Name)
		if !fresh[o.Name] {
			paths = append(paths, dst)
			continue
		}
		if err := os.Rename(filepath.Join(tmp, o.Name), dst); err != nil {
			return paths, fmt.Errorf("publishing %s: %w", o.Name, err)
		}
		paths = append(paths, dst)
	}
	return paths, nil
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm()|0o200)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if reflink(out, in) == nil {
		return nil
	}
	_, err = io.Copy(out, in)
	return err
}

var errNoReflink = errors.New("reflink unsupported")

// publishedXattr tags a published file with what it was copied from.
const publishedXattr = "user.scos-builder.published"

// publishedTag identifies a published copy: the store object it came from
// (store paths are content addresses, so the path names the bytes), its
// size, and the copy's own mtime. Editing the copy in place changes its
// mtime, so an edited file never matches and is copied again.
func publishedTag(src string, srcSize int64, dst os.FileInfo) string {
	return fmt.Sprintf("%s\x00%d\x00%d", src, srcSize, dst.ModTime().UnixNano())
}

// markPublished tags dst as an untouched copy of src. Filesystems without
// user xattrs just get full copies every time.
func markPublished(src, dst string) {
	si, err1 := os.Stat(src)
	di, err2 := os.Stat(dst)
	if err1 == nil && err2 == nil {
		_ = setXattr(dst, publishedXattr, []byte(publishedTag(src, si.Size(), di)))
	}
}

// isPublished reports whether dst is an untouched copy of src.
func isPublished(src, dst string) bool {
	si, err := os.Stat(src)
	if err != nil {
		return false
	}
	di, err := os.Lstat(dst)
	if err != nil || !di.Mode().IsRegular() || di.Size() != si.Size() {
		return false
	}
	tag, err := getXattr(dst, publishedXattr)
	return err == nil && string(tag) == publishedTag(src, si.Size(), di)
}
