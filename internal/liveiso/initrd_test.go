package liveiso

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

// archiveWith makes a newc archive of files with GNU cpio, compressed with
// the given command ("" for none).
func archiveWith(t *testing.T, compress string, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	var list []string
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		list = append(list, name)
	}
	script := "cpio -o -H newc --quiet"
	if compress != "" {
		script += " | " + compress
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(strings.Join(list, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return out
}

// An area is a sequence of archives, each plain or compressed, with zero
// padding between them; assisted-image-service writes gzip.
func TestParseInitrdSequence(t *testing.T) {
	testutil.RequireTool(t, "cpio", "gzip", "xz", "zstd")
	pad := func(n int) []byte { return make([]byte, n) }
	var area []byte
	area = append(area, archiveWith(t, "", map[string]string{"plain/a": "A1", "dup": "first"})...)
	area = append(area, pad(3)...)
	area = append(area, archiveWith(t, "gzip -9", map[string]string{"gzip/a": "G", "dup": "second"})...)
	area = append(area, pad(512)...)
	area = append(area, archiveWith(t, "xz --check=crc32", map[string]string{"xz/a": "X"})...)
	area = append(area, archiveWith(t, "zstd -q", map[string]string{"zstd/a": "Z"})...)
	area = append(area, pad(8)...)
	area = append(area, archiveWith(t, "xz --check=crc64 -e", map[string]string{"xz2/a": strings.Repeat("x", 100000), "dup": "third"})...)
	// several blocks with sizes in their headers, several zstd frames
	area = append(area, archiveWith(t, "xz -T2 --block-size=4096 --check=crc32", map[string]string{"xz3/a": strings.Repeat("y", 20000)})...)
	area = append(area, archiveWith(t, "split -b 300 --filter='zstd -q --check' -", map[string]string{"zstd2/a": strings.Repeat("z", 1000)})...)
	area = append(area, pad(4096)...)
	in, err := ParseInitrd(area)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"plain/a": "A1", "gzip/a": "G", "xz/a": "X", "zstd/a": "Z", "xz2/a": strings.Repeat("x", 100000), "dup": "third",
		"xz3/a": strings.Repeat("y", 20000), "zstd2/a": strings.Repeat("z", 1000)}
	if len(in.Members) != len(want) {
		t.Errorf("members %v", in.Paths())
	}
	for k, v := range want {
		if string(in.Members[k]) != v {
			t.Errorf("%s = %.20q, want %.20q", k, in.Members[k], v)
		}
	}

	// Our own output reads back.
	b, err := in.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseInitrd(append(b, pad(100)...))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(again.Paths(), " ") != strings.Join(in.Paths(), " ") {
		t.Errorf("round trip: %v", again.Paths())
	}
	b2, _ := again.Bytes()
	if !bytes.Equal(b, b2) {
		t.Error("encoding is not deterministic")
	}
}

func TestParseInitrdErrors(t *testing.T) {
	testutil.RequireTool(t, "cpio", "gzip", "xz")
	gz := archiveWith(t, "gzip", map[string]string{"a": "1"})
	xz := archiveWith(t, "xz --check=crc32", map[string]string{"a": "1"})
	var garbage bytes.Buffer
	zw := gzip.NewWriter(&garbage)
	zw.Write(archiveWith(t, "", map[string]string{"a": "1"}))
	zw.Write([]byte("\x00\x00zz"))
	zw.Close()
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"not cpio":          {[]byte("hello world, this is not an archive at all........................................................................................"), "bad magic"},
		"truncated gzip":    {gz[:len(gz)-5], "gzip"},
		"truncated xz":      {xz[:len(xz)-8], "xz"},
		"garbage after xz":  {append(append([]byte{}, xz...), 'Q'), "archive at offset"},
		"garbage in stream": {garbage.Bytes(), "trailing garbage"},
		"truncated archive": {archiveWith(t, "", map[string]string{"a": "1"})[:120], "unexpected EOF"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseInitrd(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if in, err := ParseInitrd(make([]byte, 1000)); err != nil || !in.Empty() {
		t.Errorf("all-zero area: %v, %v", in, err)
	}
}

// Directories are created once, in order, even with tricky sort orders.
func TestInitrdDirectories(t *testing.T) {
	testutil.RequireTool(t, "xz", "cpio")
	in := &Initrd{Members: map[string][]byte{}}
	for _, p := range []string{"c/f", "c/a/b/d/f", "d", "c/g", "c/a/c/f", "a/b/c/d/e/f", "a/b.x", "a-b/y"} {
		in.Members[p] = nil
	}
	b, err := in.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "xz -dc | cpio -it --quiet")
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "a-b a-b/y a a/b.x a/b a/b/c a/b/c/d a/b/c/d/e a/b/c/d/e/f c c/a c/a/b c/a/b/d c/a/b/d/f c/a/c c/a/c/f c/f c/g d"
	if got := strings.Join(strings.Fields(string(out)), " "); got != want {
		t.Errorf("cpio -t:\n got %s\nwant %s", got, want)
	}
}
