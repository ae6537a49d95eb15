package fstree

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFromDir(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "a/f"), []byte("data"), 0o640))
	must(os.Link(filepath.Join(dir, "a/f"), filepath.Join(dir, "a/b/hard")))
	must(os.Symlink("../f", filepath.Join(dir, "a/b/sym")))
	must(os.Chtimes(filepath.Join(dir, "a/f"), time1, time1))

	for _, store := range []*Store{nil, mustStore(t)} {
		tr, err := FromDir(dir, store)
		must(err)
		f, err := tr.Lookup("a/f")
		must(err)
		h, err := tr.Lookup("a/b/hard")
		must(err)
		if f != h || f.Kind != KindRegular || f.Mode != 0o640 || f.Mtime != time1.Unix() || f.Size() != 4 {
			t.Fatalf("a/f = %+v, hardlink shared: %v", f, f == h)
		}
		if f.Content.Digest() != BytesContent("data").Digest() {
			t.Fatalf("digest %s", f.Content.Digest())
		}
		s, err := tr.Lookup("a/b/sym")
		must(err)
		if s.Kind != KindSymlink || s.Target != "../f" {
			t.Fatalf("a/b/sym = %+v", s)
		}
		d, err := tr.Lookup("a")
		must(err)
		if d.Kind != KindDir || d.Mode != 0o750 {
			t.Fatalf("a = %+v", d)
		}
	}
}

func mustStore(t *testing.T) *Store {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var time1 = time.Unix(1234567890, 0)
