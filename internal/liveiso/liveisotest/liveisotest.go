// Package liveisotest gives tests the real CoreOS live ISOs that
// coreos-installer tests against (shared/fixtures/coreos-installer-isos),
// decompressed into the test's temporary directory.
package liveisotest

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ulikunitz/xz"

	"github.com/okd-project/scos-builder/internal/testutil"
)

// Fixture is one decompressed fixture ISO, private to the calling test.
type Fixture struct {
	Name string // e.g. "embed-areas-2023-07.x86_64"
	Path string
}

// S390x reports whether the fixture is an s390x ISO (karg area inside
// cdboot.img, NUL padded).
func (f Fixture) S390x() bool { return strings.Contains(f.Name, "s390x") }

// HasKargs reports whether the fixture has karg embed areas (the 2020-09
// ISO predates them).
func (f Fixture) HasKargs() bool { return !strings.Contains(f.Name, "2020-09") }

// Dir is the fixture directory; the test skips when it is absent.
func Dir(t testing.TB) string {
	return testutil.SharedFixtures(t, "coreos-installer-isos")
}

// All decompresses every fixture ISO into t.TempDir().
func All(t testing.TB) []Fixture {
	t.Helper()
	dir := Dir(t)
	names, err := filepath.Glob(filepath.Join(dir, "*.iso.xz"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no *.iso.xz in %s", dir)
	}
	sort.Strings(names)
	out := t.TempDir()
	var fx []Fixture
	for _, n := range names {
		name := strings.TrimSuffix(filepath.Base(n), ".iso.xz")
		p := filepath.Join(out, name+".iso")
		decompress(t, n, p)
		fx = append(fx, Fixture{Name: name, Path: p})
	}
	return fx
}

// One decompresses the fixture called name (without .iso.xz).
func One(t testing.TB, name string) Fixture {
	t.Helper()
	src := filepath.Join(Dir(t), name+".iso.xz")
	p := filepath.Join(t.TempDir(), name+".iso")
	decompress(t, src, p)
	return Fixture{Name: name, Path: p}
}

func decompress(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := xz.NewReader(in)
	if err != nil {
		t.Fatalf("decompressing %s: %v", src, err)
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatalf("decompressing %s: %v", src, err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
