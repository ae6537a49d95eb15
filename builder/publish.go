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
// store must stay intact. It returns the published paths in order.
func PublishOutputs(dir string, outputs []Output) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating output directory: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".scos-builder-publish-")
	if err != nil {
		return nil, fmt.Errorf("creating temporary directory in %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	for _, o := range outputs {
		if o.Name == "" || filepath.Base(o.Name) != o.Name {
			return nil, fmt.Errorf("publishing %s: output name must be a plain file name", o.Name)
		}
		if err := copyFile(o.Path, filepath.Join(tmp, o.Name)); err != nil {
			return nil, fmt.Errorf("publishing %s: %w", o.Name, err)
		}
	}
	paths := make([]string, 0, len(outputs))
	for _, o := range outputs {
		dst := filepath.Join(dir, o.Name)
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
