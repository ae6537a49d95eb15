package initrd

import (
	"fmt"
	"path"
	"strings"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// Kernel is the kernel and initramfs an OS image ships in
// usr/lib/modules/<version>/.
type Kernel struct {
	Version   string
	Vmlinuz   fstree.Content
	Initramfs fstree.Content
}

// FindKernel returns the one kernel under <root>/usr/lib/modules that has
// both vmlinuz and initramfs.img (root is "" for an OS tree, or a
// deployment directory inside a sysroot tree).
func FindKernel(tree *fstree.Tree, root string) (Kernel, error) {
	modules := path.Join(root, "usr/lib/modules")
	dir, err := tree.Lookup(modules)
	if err != nil || dir.Kind != fstree.KindDir {
		return Kernel{}, fmt.Errorf("finding the kernel: no directory %s in the tree", modules)
	}
	var found []Kernel
	for _, v := range dir.SortedNames() {
		d := dir.Entries[v]
		if d.Kind != fstree.KindDir {
			continue
		}
		vmlinuz, initramfs := d.Entries["vmlinuz"], d.Entries["initramfs.img"]
		if vmlinuz == nil || initramfs == nil || vmlinuz.Kind != fstree.KindRegular || initramfs.Kind != fstree.KindRegular {
			continue
		}
		k := Kernel{Version: v, Vmlinuz: vmlinuz.Content, Initramfs: initramfs.Content}
		if k.Vmlinuz == nil {
			k.Vmlinuz = fstree.BytesContent(nil)
		}
		if k.Initramfs == nil {
			k.Initramfs = fstree.BytesContent(nil)
		}
		found = append(found, k)
	}
	switch len(found) {
	case 0:
		return Kernel{}, fmt.Errorf("finding the kernel: no %s/<version>/ has both vmlinuz and initramfs.img", modules)
	case 1:
		return found[0], nil
	}
	var vs []string
	for _, k := range found {
		vs = append(vs, k.Version)
	}
	return Kernel{}, fmt.Errorf("finding the kernel: %d kernels in %s (%s); the live image needs exactly one", len(found), modules, strings.Join(vs, ", "))
}
