package squashfs

import (
	"fmt"
	"math/rand/v2"
	"path"
	"strings"

	"github.com/okd-project/scos-builder/internal/fstree"
	"golang.org/x/sys/unix"
)

// genOptions shape a generated tree.
type genOptions struct {
	seed      uint64
	dirs      int   // directories besides the root
	entries   int   // entries per directory (upper bound)
	bigDir    int   // entries of one extra large directory; 0 for none
	hugeZero  int64 // size of a fully sparse file (0 for none)
	blockSize int   // the block size the tree targets (for block-aligned holes)
}

// genTree builds a random tree with every entry type, xattrs in the three
// namespaces with shared values, hardlinks, duplicate and sparse contents
// and long names.
func genTree(o genOptions) *fstree.Tree {
	r := rand.New(rand.NewPCG(o.seed, 0x5eed))
	t := fstree.New()
	t.Root.Mtime = int64(r.Uint32())
	ids := []uint32{0, 1, 100, 1000, 65534, 100000, 4294967294}
	labels := []string{
		"system_u:object_r:usr_t:s0", "system_u:object_r:bin_t:s0",
		"system_u:object_r:etc_t:s0", "system_u:object_r:lib_t:s0",
	}
	dirs := []string{""}
	var nondirs []*fstree.Inode
	var contents [][]byte
	nameChars := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=~@ é"
	name := func() string {
		n := 1 + r.IntN(20)
		if r.IntN(30) == 0 {
			n = 255
		}
		var b strings.Builder
		for b.Len() < n {
			c := string([]rune(nameChars)[r.IntN(len([]rune(nameChars)))])
			if b.Len()+len(c) > n {
				c = "x"
			}
			b.WriteString(c)
		}
		s := b.String()
		if s == "." || s == ".." {
			s = "dot" + s
		}
		return s
	}
	meta := func(ino *fstree.Inode) {
		ino.UID = ids[r.IntN(len(ids))]
		ino.GID = ids[r.IntN(len(ids))]
		ino.Mtime = int64(r.Uint32())
		if r.IntN(4) != 0 {
			ino.SetXattr("security.selinux", append([]byte(labels[r.IntN(len(labels))]), 0))
		}
		// Linux keeps user.* only on regular files and directories.
		userOK := ino.Kind == fstree.KindRegular || ino.Kind == fstree.KindDir
		if userOK && r.IntN(5) == 0 {
			v := make([]byte, r.IntN(300))
			for i := range v {
				v[i] = byte(r.IntN(256))
			}
			ino.SetXattr(fmt.Sprintf("user.attr%d", r.IntN(3)), v)
		}
		if r.IntN(8) == 0 {
			ino.SetXattr("trusted.t", []byte(labels[r.IntN(len(labels))]))
		}
		if userOK && r.IntN(20) == 0 {
			ino.SetXattr("user.empty", []byte{})
		}
	}
	bs := o.blockSize
	content := func() fstree.Content {
		switch k := r.IntN(12); {
		case k == 0 && len(contents) > 0: // duplicate
			return fstree.BytesContent(contents[r.IntN(len(contents))])
		case k == 1:
			return fstree.ZeroContent(r.IntN(3 * bs))
		case k == 2:
			return nil
		}
		sizes := []int{0, 1, r.IntN(bs), bs, 2*bs + r.IntN(bs), 4*bs + r.IntN(bs), r.IntN(8 * bs)}
		size := sizes[r.IntN(len(sizes))]
		data := make([]byte, size)
		switch r.IntN(3) {
		case 0: // incompressible
			for i := range data {
				data[i] = byte(r.Uint32())
			}
		case 1: // compressible text
			words := []string{"lorem ", "ipsum ", "squashfs ", "ostree ", "\n"}
			var b strings.Builder
			for b.Len() < size {
				b.WriteString(words[r.IntN(len(words))])
			}
			copy(data, b.String())
		case 2: // data with block-aligned holes
			for i := range data {
				if (i/bs)%2 == 1 {
					continue
				}
				data[i] = byte(i*7 + 3)
			}
		}
		contents = append(contents, data)
		return fstree.BytesContent(data)
	}
	add := func(dir string, ino *fstree.Inode) string {
		for {
			p := path.Join(dir, name())
			if _, err := t.Lookup(p); err == nil {
				continue
			}
			if err := t.Add(p, ino); err != nil {
				panic(err)
			}
			return p
		}
	}
	for range o.dirs {
		parent := dirs[r.IntN(len(dirs))]
		d := fstree.NewDir(uint32(r.IntN(0o10000)), 0, 0)
		d.Kind = fstree.KindDir
		meta(d)
		dirs = append(dirs, add(parent, d))
	}
	newEntry := func() *fstree.Inode {
		ino := &fstree.Inode{Mode: uint32(r.IntN(0o10000))}
		switch k := r.IntN(20); {
		case k < 12:
			ino.Kind = fstree.KindRegular
			ino.Content = content()
		case k < 15:
			ino.Kind = fstree.KindSymlink
			ino.Mode = 0o777
			n := 1 + r.IntN(100)
			if r.IntN(20) == 0 {
				n = 4000
			}
			ino.Target = strings.Repeat("../target/", n)[:n]
		case k == 15:
			ino.Kind = fstree.KindCharDev
			ino.Rdev = unix.Mkdev(uint32(r.IntN(4096)), uint32(r.IntN(1<<20)))
		case k == 16:
			ino.Kind = fstree.KindBlockDev
			ino.Rdev = unix.Mkdev(uint32(r.IntN(4096)), uint32(r.IntN(300)))
		case k == 17:
			ino.Kind = fstree.KindFifo
		case k == 18:
			ino.Kind = fstree.KindSocket
		default:
			if len(nondirs) > 0 { // hardlink
				return nondirs[r.IntN(len(nondirs))]
			}
			ino.Kind = fstree.KindFifo
		}
		meta(ino)
		nondirs = append(nondirs, ino)
		return ino
	}
	for _, d := range dirs {
		for range r.IntN(o.entries + 1) {
			add(d, newEntry())
		}
	}
	if o.hugeZero > 0 {
		add("", &fstree.Inode{Kind: fstree.KindRegular, Mode: 0o644, Content: fstree.ZeroContent(o.hugeZero)})
	}
	if o.bigDir > 0 {
		big := fstree.NewDir(0o755, 0, 0)
		t.Add("big-directory", big)
		for i := range o.bigDir {
			var ino *fstree.Inode
			if i%100 == 0 {
				ino = newEntry()
			} else {
				ino = &fstree.Inode{Kind: fstree.KindRegular, Mode: 0o644, Mtime: int64(i),
					Content: fstree.BytesContent(fmt.Sprintf("file %d\n", i))}
			}
			big.Entries[fmt.Sprintf("entry-%06d-%s", i, strings.Repeat("n", i%40))] = ino
		}
	}
	return t
}
