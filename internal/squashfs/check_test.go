package squashfs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/testutil"
	"golang.org/x/sys/unix"
)

// entry is what a path in the tree should look like.
type entry struct {
	ino   *fstree.Inode
	nlink uint32
}

// expectations maps tree paths ("." for the root) to entries.
func expectations(t *fstree.Tree) map[string]entry {
	counts := t.LinkCounts()
	m := map[string]entry{}
	_ = t.Walk(func(p string, ino *fstree.Inode) error {
		if p == "" {
			p = "."
		}
		m[p] = entry{ino: ino, nlink: counts[ino]}
		return nil
	})
	return m
}

func writeImage(t *testing.T, tree *fstree.Tree, opts Options) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "image.sqfs")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Write(context.Background(), f, tree, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != n || n%4096 != 0 {
		t.Fatalf("image is %d bytes, Write returned %d (want a multiple of 4096)", st.Size(), n)
	}
	return img
}

func permString(ino *fstree.Inode) string {
	types := map[fstree.Kind]byte{
		fstree.KindRegular: '-', fstree.KindDir: 'd', fstree.KindSymlink: 'l', fstree.KindCharDev: 'c',
		fstree.KindBlockDev: 'b', fstree.KindFifo: 'p', fstree.KindSocket: 's',
	}
	s := []byte{types[ino.Kind]}
	m := ino.Mode
	for i, who := range []uint32{6, 3, 0} {
		bits := m >> who & 7
		for j, c := range "rwx" {
			if bits&(4>>j) != 0 {
				s = append(s, byte(c))
			} else {
				s = append(s, '-')
			}
		}
		special := []uint32{0o4000, 0o2000, 0o1000}[i]
		if m&special != 0 {
			x := s[len(s)-1] == 'x'
			c := []byte("sst")[i]
			if !x {
				c -= 'a' - 'A'
			}
			s[len(s)-1] = c
		}
	}
	return string(s)
}

var listingLine = regexp.MustCompile(`^(\S{10}) (\d+)/(\d+) +(\d+|-?\d+, *\d+) (\d{4}-\d\d-\d\d \d\d:\d\d) squashfs-root(.*)$`)

// checkListing compares `unsquashfs -lln` with the tree.
func checkListing(t *testing.T, img string, tree *fstree.Tree) {
	t.Helper()
	want := expectations(tree)
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(testutil.Run(t, "unsquashfs", "-lln", img)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := listingLine.FindStringSubmatch(sc.Text())
		if m == nil {
			if strings.Contains(sc.Text(), "squashfs-root") {
				t.Errorf("unparsed listing line %q", sc.Text())
			}
			continue
		}
		p, target := m[6], ""
		if m[1][0] == 'l' {
			p, target, _ = strings.Cut(p, " -> ")
		}
		p = strings.TrimPrefix(p, "/")
		if p == "" {
			p = "."
		}
		e, ok := want[p]
		if !ok {
			t.Errorf("listing has %q, the tree does not", p)
			continue
		}
		seen[p] = true
		ino := e.ino
		size := strconv.FormatInt(ino.Size(), 10)
		if ino.Kind == fstree.KindCharDev || ino.Kind == fstree.KindBlockDev {
			// unsquashfs (4.5) lists the packed number as (int)rdev>>8, rdev&0xff;
			// extraction and the kernel decode it fully (checkDir).
			enc, _ := encodeDev(ino.Rdev)
			size = fmt.Sprintf("%d,%d", int32(enc)>>8, enc&0xff)
		}
		gotSize := strings.ReplaceAll(m[4], " ", "")
		if ino.Kind == fstree.KindDir {
			gotSize = size
		}
		got := fmt.Sprintf("%s %s/%s %s %s %q", m[1], m[2], m[3], gotSize, m[5], target)
		exp := fmt.Sprintf("%s %d/%d %s %s %q", permString(ino), ino.UID, ino.GID, size,
			time.Unix(ino.Mtime, 0).UTC().Format("2006-01-02 15:04"), ino.Target)
		if got != exp {
			t.Errorf("listing of %q:\n got %s\nwant %s", p, got, exp)
		}
	}
	for p := range want {
		if !seen[p] {
			t.Errorf("listing lacks %q", p)
		}
	}
}

func unescapeGetfattr(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// xattrsOf dumps the xattrs of every file under dir with getfattr.
func xattrsOf(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	cmd := exec.Command("getfattr", "-h", "-R", "-P", "-d", "-m", "-", "-e", "hex", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("getfattr: %v\n%s", err, stderr.String())
	}
	res := map[string]map[string]string{}
	var cur map[string]string
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "# file: "):
			p := unescapeGetfattr(strings.TrimPrefix(line, "# file: "))
			p = strings.TrimPrefix(p, "./")
			cur = map[string]string{}
			res[p] = cur
		case line == "" || cur == nil:
		default:
			name, val, _ := strings.Cut(line, "=")
			cur[unescapeGetfattr(name)] = strings.TrimPrefix(val, "0x")
		}
	}
	return res
}

// checkDir compares a directory (an extraction or a mount) with the tree:
// types, modes, owners, mtimes, sizes, contents, symlink targets, device
// numbers, link counts, hardlink identity and xattrs (through getfattr).
// Sockets are compared only when sockets is true.
func checkDir(t *testing.T, dir string, tree *fstree.Tree, sockets bool) {
	t.Helper()
	want := expectations(tree)
	seen := map[string]bool{}
	inodes := map[*fstree.Inode]uint64{}
	err := filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		p, _ := filepath.Rel(dir, full)
		e, ok := want[p]
		if !ok {
			t.Errorf("%s: not in the tree", p)
			return nil
		}
		seen[p] = true
		var st unix.Stat_t
		if err := unix.Lstat(full, &st); err != nil {
			return err
		}
		ino := e.ino
		kind := map[uint32]fstree.Kind{unix.S_IFREG: fstree.KindRegular, unix.S_IFDIR: fstree.KindDir,
			unix.S_IFLNK: fstree.KindSymlink, unix.S_IFCHR: fstree.KindCharDev, unix.S_IFBLK: fstree.KindBlockDev,
			unix.S_IFIFO: fstree.KindFifo, unix.S_IFSOCK: fstree.KindSocket}[st.Mode&unix.S_IFMT]
		got := fmt.Sprintf("%s %o %d:%d nlink=%d mtime=%d size=%d", kind, st.Mode&0o7777, st.Uid, st.Gid, st.Nlink, st.Mtim.Sec, st.Size)
		size := ino.Size()
		if ino.Kind == fstree.KindDir {
			size = st.Size
		}
		exp := fmt.Sprintf("%s %o %d:%d nlink=%d mtime=%d size=%d", ino.Kind, ino.Mode, ino.UID, ino.GID, e.nlink, ino.Mtime, size)
		if ino.Kind == fstree.KindSymlink {
			got = strings.Replace(got, fmt.Sprintf(" %o ", st.Mode&0o7777), " 777 ", 1)
			exp = strings.Replace(exp, fmt.Sprintf(" %o ", ino.Mode), " 777 ", 1)
		}
		if got != exp {
			t.Errorf("%s:\n got %s\nwant %s", p, got, exp)
			return nil
		}
		if prev, ok := inodes[ino]; ok && prev != st.Ino {
			t.Errorf("%s: hardlink has inode %d, its other names %d", p, st.Ino, prev)
		}
		inodes[ino] = st.Ino
		switch ino.Kind {
		case fstree.KindSymlink:
			target, err := os.Readlink(full)
			if err != nil || target != ino.Target {
				t.Errorf("%s: symlink target %q (%v), want %q", p, target, err, ino.Target)
			}
		case fstree.KindCharDev, fstree.KindBlockDev:
			if st.Rdev != ino.Rdev {
				t.Errorf("%s: rdev %d:%d, want %d:%d", p, unix.Major(st.Rdev), unix.Minor(st.Rdev), unix.Major(ino.Rdev), unix.Minor(ino.Rdev))
			}
		case fstree.KindRegular:
			checkContent(t, p, full, ino.Content)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, e := range want {
		if !seen[p] && (sockets || e.ino.Kind != fstree.KindSocket) {
			t.Errorf("%s: missing", p)
		}
	}
	attrs := xattrsOf(t, dir)
	for p, e := range want {
		if !seen[p] {
			continue
		}
		exp := map[string]string{}
		for _, x := range e.ino.Xattrs {
			exp[x.Name] = hex.EncodeToString(x.Value)
		}
		got := attrs[p]
		if p == "." {
			got = attrs[""]
			if got == nil {
				got = attrs["."]
			}
		}
		if fmt.Sprint(sortedMap(got)) != fmt.Sprint(sortedMap(exp)) {
			t.Errorf("%s: xattrs\n got %v\nwant %v", p, sortedMap(got), sortedMap(exp))
		}
	}
}

func sortedMap(m map[string]string) []string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return s
}

// checkContent compares file data; fully sparse contents larger than
// 64 MiB are sampled around the block and 4 GiB boundaries.
func checkContent(t *testing.T, p, full string, c fstree.Content) {
	t.Helper()
	if c == nil {
		c = fstree.BytesContent(nil)
	}
	f, err := os.Open(full)
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	defer f.Close()
	if z, ok := c.(fstree.ZeroContent); ok && z > 64<<20 {
		buf := make([]byte, 1<<16)
		for _, off := range []int64{0, 4<<30 - 1<<15, int64(z) - 1<<16} {
			n, err := f.ReadAt(buf, off)
			if (err != nil && err != io.EOF) || !bytes.Equal(buf[:n], make([]byte, n)) {
				t.Errorf("%s: not zero at %d (%v)", p, off, err)
			}
		}
		return
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	r, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := sha256.New()
	if _, err := io.Copy(w, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), w.Sum(nil)) {
		t.Errorf("%s: content differs", p)
	}
}
