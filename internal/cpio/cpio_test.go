package cpio

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

type entry struct {
	h    Header
	data string
}

func writeArchive(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		h.Size = int64(len(e.data))
		if err := w.WriteEntry(&h, strings.NewReader(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Offset() != int64(buf.Len()) {
		t.Fatalf("Offset() = %d, wrote %d", w.Offset(), buf.Len())
	}
	return buf.Bytes()
}

var sample = []entry{
	{Header{Name: "etc", Mode: ModeDir | 0o755}, ""},
	{Header{Name: "etc/hello", Mode: ModeRegular | 0o644, UID: 1000, GID: 100, Mtime: 1700000000}, "hello\n"},
	{Header{Name: "etc/link", Mode: ModeSymlink | 0o777}, "hello"},
	{Header{Name: "etc/abc", Mode: ModeRegular | 0o600}, "abcd"},
}

func TestRoundTrip(t *testing.T) {
	archive := writeArchive(t, sample)
	// Something after the archive must stay unread.
	src := bytes.NewReader(append(append([]byte{}, archive...), "NEXT"...))
	r := NewReader(src)
	var got []entry
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		hh := *h
		hh.Size = 0
		hh.NLink = 0
		got = append(got, entry{hh, string(data)})
		if h.NLink != 1 {
			t.Errorf("%s: nlink %d, want 1", h.Name, h.NLink)
		}
	}
	if len(got) != len(sample) {
		t.Fatalf("read %d entries, wrote %d", len(got), len(sample))
	}
	for i := range got {
		if got[i] != sample[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], sample[i])
		}
	}
	if r.Offset() != int64(len(archive)) {
		t.Errorf("reader consumed %d bytes, archive is %d", r.Offset(), len(archive))
	}
	rest, _ := io.ReadAll(src)
	if string(rest) != "NEXT" {
		t.Errorf("data after the archive: %q", rest)
	}
}

func TestHeaderLen(t *testing.T) {
	if got := HeaderLen("root.squashfs"); got != 124 {
		t.Errorf("HeaderLen(root.squashfs) = %d, want 124", got)
	}
	if got := HeaderLen("root.erofs"); got != 124 {
		t.Errorf("HeaderLen(root.erofs) = %d, want 124", got)
	}
	if got := EntryLen("a", 5); got != 112+8 {
		t.Errorf("EntryLen(a, 5) = %d, want 120", got)
	}
	archive := writeArchive(t, []entry{{Header{Name: "root.squashfs", Mode: ModeRegular | 0o644}, "hsqs...."}})
	if string(archive[124:128]) != "hsqs" {
		t.Errorf("data does not start at HeaderLen: %q", archive[120:130])
	}
}

// TestMarshal checks that Marshal gives the bytes the Writer writes, so a
// caller can write a header at a fixed offset and patch its size later.
func TestMarshal(t *testing.T) {
	h := Header{Name: "root.squashfs", Mode: ModeRegular | 0o644, Ino: 1, Mtime: 1700000000, Size: 8}
	b, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != HeaderLen(h.Name) {
		t.Errorf("Marshal gave %d bytes, HeaderLen is %d", len(b), HeaderLen(h.Name))
	}
	archive := writeArchive(t, []entry{{h, "hsqs...."}})
	if !bytes.Equal(archive[:len(b)], b) {
		t.Errorf("Marshal = %q, the Writer wrote %q", b, archive[:len(b)])
	}
	if _, err := (&Header{Name: "x", Size: 1 << 32}).Marshal(); err == nil {
		t.Error("Marshal accepted a size beyond 32 bits")
	}
	if _, err := (&Header{}).Marshal(); err == nil {
		t.Error("Marshal accepted an empty name")
	}
}

func TestErrors(t *testing.T) {
	archive := writeArchive(t, sample)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"bad magic":    {append([]byte("070707"), archive[6:]...), "bad magic"},
		"truncated":    {archive[:200], "unexpected EOF"},
		"no trailer":   {archive[:EntryLen("etc", 0)], "without TRAILER!!!"},
		"bad hex":      {append([]byte("070701zzzzzzzz"), archive[14:]...), "not hex"},
		"empty":        {nil, "without TRAILER!!!"},
		"unterminated": {bytes.Replace(archive, []byte("etc\x00"), []byte("etcX"), 1), "NUL-terminated"},
	} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tc.data))
			var err error
			for err == nil {
				_, err = r.Next()
				if err == nil {
					_, err = io.ReadAll(r)
				}
			}
			if err == io.EOF || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteHeader(&Header{Name: "a", Mode: ModeRegular, Size: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("12345")); err == nil {
		t.Error("writing more than Size succeeded")
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "short") {
		t.Errorf("closing with a short entry: %v", err)
	}
	if err := NewWriter(io.Discard).WriteEntry(&Header{Name: "b", Size: 10}, strings.NewReader("short")); err == nil {
		t.Error("WriteEntry with a short reader succeeded")
	}
}

// GNU cpio reads what we write and we read what it writes.
func TestGNUCpio(t *testing.T) {
	testutil.RequireTool(t, "cpio")
	dir := t.TempDir()
	archive := writeArchive(t, sample)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-i", "--quiet", "--make-directories", "--no-absolute-filenames")
	cmd.Dir = out
	cmd.Stdin = bytes.NewReader(archive)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(out, "etc/hello")); err != nil || string(b) != "hello\n" {
		t.Errorf("etc/hello extracted by GNU cpio: %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(out, "etc/link")); err != nil || l != "hello" {
		t.Errorf("etc/link extracted by GNU cpio: %q, %v", l, err)
	}

	// GNU cpio's archive of a tree with root.squashfs first, as cosa builds rootfs.img.
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "root.squashfs"), []byte("hsqs-and-more"), 0o644)
	os.WriteFile(filepath.Join(src, "etc/coreos-live-rootfs"), []byte("1.2.3\n"), 0o644)
	cmd = exec.Command("cpio", "-o", "-H", "newc", "-R", "root:root", "--quiet", "--reproducible")
	cmd.Dir = src
	cmd.Stdin = strings.NewReader("root.squashfs\netc\netc/coreos-live-rootfs\n")
	gnu, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -o: %v", err)
	}
	if string(gnu[HeaderLen("root.squashfs"):][:4]) != "hsqs" {
		t.Errorf("GNU cpio data offset differs from HeaderLen")
	}
	r := NewReader(bytes.NewReader(gnu))
	files := map[string]string{}
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		if h.IsRegular() {
			files[h.Name] = string(b)
		}
	}
	if files["root.squashfs"] != "hsqs-and-more" || files["etc/coreos-live-rootfs"] != "1.2.3\n" || len(files) != 2 {
		t.Errorf("read from GNU cpio archive: %q", files)
	}
}
