package ostree

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// The first deployment of a fresh sysroot, as ostree admin deploy makes
// it: boot version 1 (boot/loader.1), subboot version 1 (ostree/boot.1.1),
// deployment serial 0, boot serial 0. The CoreOS live initramfs globs
// ostree/boot.1/*/*/0.
const (
	bootVersion    = 1
	subbootVersion = 1
	deploySerial   = 0
	bootSerial     = 0
)

// LabelOSName is the image label naming the stateroot (FCOS sets it).
const LabelOSName = "com.coreos.osname"

// DeployOptions configure Deploy.
type DeployOptions struct {
	// OSName is the stateroot; when empty the image label
	// com.coreos.osname is used.
	OSName string
	// ImageRef is written to the origin file; default: the import's
	// ImageRef. A reference without an ostree-* transport gets
	// ostree-unverified-registry:.
	ImageRef string
	// Kargs go before ostree= in the BLS entry options.
	Kargs []string
	// BootKernelLinks also hardlinks vmlinuz (and its .hmac) into /boot,
	// as the CoreOS live rootfs has it (FIPS checks look there).
	BootKernelLinks bool
	// SourceDateEpoch is the mtime of files and directories Deploy
	// writes itself (BLS entry, origin, refs, aleph file, sysroot
	// directories); default: the merge commit's timestamp, else 1.
	// Repository objects and the deployment checkout have mtime 0, as
	// ostree makes them.
	SourceDateEpoch int64
	// Store receives the files Deploy writes (BLS entry, origin, refs,
	// aleph file) so the sysroot tree can be encoded with fstree.Encode
	// and decoded against the store. Nil keeps them in memory.
	Store *fstree.Store
}

// DeployInfo describes a deployment made by Deploy. Paths are relative to
// the sysroot tree.
type DeployInfo struct {
	OSName        string
	Commit        string
	KernelVersion string
	Bootcsum      string
	// DeployPath is ostree/deploy/<os>/deploy/<commit>.0.
	DeployPath string
	// Vmlinuz and Initramfs are under boot/ostree/<os>-<bootcsum>/;
	// Initramfs and Hmac are "" when the image has none.
	Vmlinuz   string
	Initramfs string
	Hmac      string
	// BLSEntry is boot/loader.1/entries/ostree-1-<os>.conf and Options
	// its options line.
	BLSEntry string
	Options  string
	// Bootlink is ostree/boot.1.1/<os>/<bootcsum>/0.
	Bootlink string
}

// Deploy lays out the physical sysroot of the import's merge commit,
// exactly as ostree admin deploy does for the first deployment: bare
// repository, hardlink checkout, /etc copied from usr/etc, stateroot var,
// kernel and initramfs in /boot/ostree, BLS entry, bootlinks, deployment
// ref, origin file, and .aleph-version.json. The import result is not
// modified; file inodes are shared with it.
func Deploy(imp *ImportResult, opts DeployOptions) (*fstree.Tree, *DeployInfo, error) {
	osname := opts.OSName
	if osname == "" {
		osname = imp.Labels[LabelOSName]
	}
	if osname == "" {
		return nil, nil, fmt.Errorf("deploying: no OS name (stateroot) given and the image has no %s label", LabelOSName)
	}
	if strings.ContainsAny(osname, "/ \t\n") || osname == "." || osname == ".." {
		return nil, nil, fmt.Errorf("deploying: invalid OS name %q", osname)
	}
	imageRef := ContainerImageRef(opts.ImageRef)
	if imageRef == "" {
		imageRef = imp.ImageRef
	}
	if imageRef == "" {
		return nil, nil, errors.New("deploying: no image reference for the origin file")
	}
	epoch := opts.SourceDateEpoch
	if epoch <= 0 {
		epoch = imp.Timestamp
	}
	if epoch <= 0 {
		// libostree skips loading a sysroot whose ostree/deploy has
		// mtime 0 (it looks unchanged since "never"): never write 0.
		epoch = 1
	}
	d := &deployer{imp: imp, epoch: epoch, t: fstree.New(), store: opts.Store}
	d.t.Root.Mtime = epoch
	info := &DeployInfo{OSName: osname, Commit: imp.Commit}

	// The deployment checkout: directories are new, files and symlinks
	// are the repository objects themselves (hardlinks).
	checkout := checkoutDirs(imp.Root.Root)
	if err := prepareEtc(checkout); err != nil {
		return nil, nil, fmt.Errorf("deploying %s: %w", imp.Commit, err)
	}
	ct := &fstree.Tree{Root: checkout}
	k, err := findKernel(ct)
	if err != nil {
		return nil, nil, fmt.Errorf("deploying %s: %w", imp.Commit, err)
	}
	info.KernelVersion = k.version
	if info.Bootcsum, err = k.bootcsum(); err != nil {
		return nil, nil, fmt.Errorf("deploying %s: computing bootcsum: %w", imp.Commit, err)
	}
	title, err := bootTitle(ct)
	if err != nil {
		return nil, nil, fmt.Errorf("deploying %s: %w", imp.Commit, err)
	}

	B := info.Bootcsum
	info.DeployPath = fmt.Sprintf("ostree/deploy/%s/deploy/%s.%d", osname, imp.Commit, deploySerial)
	if _, err := d.mkdir(path.Dir(info.DeployPath)); err != nil {
		return nil, nil, err
	}
	if err := d.t.Add(info.DeployPath, checkout); err != nil {
		return nil, nil, err
	}
	origin := "[origin]\ncontainer-image-reference=" + imageRef + "\n"
	if err := d.file(info.DeployPath+".origin", origin, 0o644); err != nil {
		return nil, nil, err
	}

	// Stateroot var, as ostree admin os-init (2022.7) creates it.
	varDir := "ostree/deploy/" + osname + "/var"
	for _, sub := range []string{"lib", "log"} {
		if _, err := d.mkdir(varDir + "/" + sub); err != nil {
			return nil, nil, err
		}
	}
	tmp, err := d.mkdir(varDir + "/tmp")
	if err != nil {
		return nil, nil, err
	}
	tmp.Mode = 0o1777
	if err := d.symlink(varDir+"/lock", "../run/lock"); err != nil {
		return nil, nil, err
	}
	if err := d.symlink(varDir+"/run", "../run"); err != nil {
		return nil, nil, err
	}
	if err := d.file(varDir+"/.ostree-selabeled", "", 0o644); err != nil {
		return nil, nil, err
	}

	// Repository: the imported objects and refs plus the deployment ref.
	repo := copyDirs(imp.Repo.Root)
	if err := d.t.Add("ostree/repo", repo); err != nil {
		return nil, nil, err
	}
	if err := d.file("ostree/repo/config", RepoConfig, 0o644); err != nil {
		return nil, nil, err
	}
	ref := fmt.Sprintf("ostree/%d/%d/%d", bootVersion, subbootVersion, 0)
	if err := d.file("ostree/repo/refs/heads/"+ref, imp.Commit+"\n", 0o644); err != nil {
		return nil, nil, err
	}

	// Kernel, initramfs and friends in /boot/ostree/<os>-<bootcsum>/.
	bootDir := fmt.Sprintf("boot/ostree/%s-%s", osname, B)
	if _, err := d.mkdir(bootDir); err != nil {
		return nil, nil, err
	}
	info.Vmlinuz = bootDir + "/vmlinuz-" + k.version
	if err := d.t.Add(info.Vmlinuz, k.vmlinuz); err != nil {
		return nil, nil, err
	}
	if k.initramfs != nil {
		info.Initramfs = bootDir + "/initramfs-" + k.version + ".img"
		if err := d.t.Add(info.Initramfs, k.initramfs); err != nil {
			return nil, nil, err
		}
	}
	if k.hmac != nil {
		info.Hmac = bootDir + "/.vmlinuz-" + k.version + ".hmac"
		if err := d.t.Add(info.Hmac, k.hmac); err != nil {
			return nil, nil, err
		}
	}
	if k.devicetree != nil {
		if err := d.t.Add(bootDir+"/devicetree-"+k.version, k.devicetree); err != nil {
			return nil, nil, err
		}
	} else if k.dtb != nil {
		if err := d.t.Add(bootDir+"/dtb-"+k.version, copyDirs(k.dtb)); err != nil {
			return nil, nil, err
		}
	}
	if opts.BootKernelLinks {
		if err := d.t.Add("boot/vmlinuz-"+k.version, k.vmlinuz); err != nil {
			return nil, nil, err
		}
		if k.hmac != nil {
			if err := d.t.Add("boot/.vmlinuz-"+k.version+".hmac", k.hmac); err != nil {
				return nil, nil, err
			}
		}
	}

	// Bootlinks and the boot loader entry.
	info.Bootlink = fmt.Sprintf("ostree/boot.%d.%d/%s/%s/%d", bootVersion, subbootVersion, osname, B, bootSerial)
	if _, err := d.mkdir(path.Dir(info.Bootlink)); err != nil {
		return nil, nil, err
	}
	if err := d.symlink(info.Bootlink, fmt.Sprintf("../../../deploy/%s/deploy/%s.%d", osname, imp.Commit, deploySerial)); err != nil {
		return nil, nil, err
	}
	if err := d.symlink(fmt.Sprintf("ostree/boot.%d", bootVersion), fmt.Sprintf("boot.%d.%d", bootVersion, subbootVersion)); err != nil {
		return nil, nil, err
	}
	ostreeArg := fmt.Sprintf("ostree=/ostree/boot.%d/%s/%s/%d", bootVersion, osname, B, bootSerial)
	opt := append(append([]string{}, opts.Kargs...), ostreeArg)
	if k.initramfs == nil {
		opt = append(opt, fmt.Sprintf("init=/ostree/boot.%d/%s/%s/%d/usr/lib/ostree/ostree-prepare-root", bootVersion, osname, B, bootSerial))
	}
	info.Options = strings.Join(opt, " ")
	var bls strings.Builder
	fmt.Fprintf(&bls, "title %s (ostree:0)\n", title)
	fmt.Fprintf(&bls, "version 1\n")
	fmt.Fprintf(&bls, "options %s\n", info.Options)
	fmt.Fprintf(&bls, "linux /%s\n", strings.TrimPrefix(info.Vmlinuz, "boot/"))
	if info.Initramfs != "" {
		fmt.Fprintf(&bls, "initrd /%s\n", strings.TrimPrefix(info.Initramfs, "boot/"))
	}
	if k.devicetree != nil {
		fmt.Fprintf(&bls, "devicetree /%s/devicetree-%s\n", strings.TrimPrefix(bootDir, "boot/"), k.version)
	} else if k.dtb != nil {
		fmt.Fprintf(&bls, "fdtdir /%s/dtb-%s\n", strings.TrimPrefix(bootDir, "boot/"), k.version)
	}
	info.BLSEntry = fmt.Sprintf("boot/loader.%d/entries/ostree-1-%s.conf", bootVersion, osname)
	if err := d.file(info.BLSEntry, bls.String(), 0o644); err != nil {
		return nil, nil, err
	}
	if err := d.symlink("boot/loader", fmt.Sprintf("loader.%d", bootVersion)); err != nil {
		return nil, nil, err
	}
	if err := d.symlink("boot/boot", "."); err != nil {
		return nil, nil, err
	}

	aleph, err := alephJSON(imp, imageRef)
	if err != nil {
		return nil, nil, err
	}
	if err := d.file(".aleph-version.json", aleph, 0o644); err != nil {
		return nil, nil, err
	}
	if err := d.symlink(".coreos-aleph-version.json", ".aleph-version.json"); err != nil {
		return nil, nil, err
	}
	return d.t, info, nil
}

type deployer struct {
	imp   *ImportResult
	epoch int64
	t     *fstree.Tree
	store *fstree.Store
}

func (d *deployer) mkdir(p string) (*fstree.Inode, error) {
	cur := d.t.Root
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." {
			continue
		}
		next, ok := cur.Entries[c]
		if !ok {
			next = fstree.NewDir(0o755, 0, 0)
			next.Mtime = d.epoch
			cur.Entries[c] = next
		} else if next.Kind != fstree.KindDir {
			return nil, fmt.Errorf("deploying: %s: %s is a %s", p, c, next.Kind)
		}
		cur = next
	}
	return cur, nil
}

func (d *deployer) file(p, content string, mode uint32) error {
	if _, err := d.mkdir(path.Dir(p)); err != nil {
		return err
	}
	ino := &fstree.Inode{Kind: fstree.KindRegular, Mode: mode, Mtime: d.epoch}
	if content != "" {
		ino.Content = fstree.BytesContent(content)
		if d.store != nil {
			c, err := d.store.PutBytes([]byte(content))
			if err != nil {
				return fmt.Errorf("deploying %s: %w", p, err)
			}
			ino.Content = c
		}
	}
	if err := d.t.Add(p, ino); err != nil {
		return fmt.Errorf("deploying: %w", err)
	}
	return nil
}

func (d *deployer) symlink(p, target string) error {
	if _, err := d.mkdir(path.Dir(p)); err != nil {
		return err
	}
	if err := d.t.Add(p, &fstree.Inode{Kind: fstree.KindSymlink, Mode: 0o777, Target: target, Mtime: d.epoch}); err != nil {
		return fmt.Errorf("deploying: %w", err)
	}
	return nil
}

// copyDirs copies the directory structure below dir; files and symlinks
// stay the same inodes (hardlinks).
func copyDirs(dir *fstree.Inode) *fstree.Inode {
	c := *dir
	c.Xattrs = append([]fstree.Xattr(nil), dir.Xattrs...)
	c.Entries = make(map[string]*fstree.Inode, len(dir.Entries))
	for name, child := range dir.Entries {
		if child.Kind == fstree.KindDir {
			child = copyDirs(child)
		}
		c.Entries[name] = child
	}
	return &c
}

// checkoutDirs is copyDirs for a deployment checkout: like ostree's
// hardlink checkout, zero-sized regular files are copied, not linked
// (they are often shared by thousands of paths).
func checkoutDirs(dir *fstree.Inode) *fstree.Inode {
	c := *dir
	c.Xattrs = append([]fstree.Xattr(nil), dir.Xattrs...)
	c.Entries = make(map[string]*fstree.Inode, len(dir.Entries))
	for name, child := range dir.Entries {
		switch {
		case child.Kind == fstree.KindDir:
			child = checkoutDirs(child)
		case child.Kind == fstree.KindRegular && child.Size() == 0:
			cp := *child
			cp.Xattrs = append([]fstree.Xattr(nil), child.Xattrs...)
			child = &cp
		}
		c.Entries[name] = child
	}
	return &c
}

// copyAll copies everything below dir into new inodes (a real copy that
// shares only file data); hardlinks within dir stay hardlinks.
func copyAll(dir *fstree.Inode) *fstree.Inode {
	return (&fstree.Tree{Root: dir}).Clone().Root
}

// prepareEtc does prepare_deployment_etc: /etc alone moves to usr/etc,
// both populated is an error, then usr/etc is copied to /etc.
func prepareEtc(root *fstree.Inode) error {
	usr := root.Entries["usr"]
	if usr == nil || usr.Kind != fstree.KindDir {
		return errors.New("the commit has no /usr directory")
	}
	usrEtc := usr.Entries["etc"]
	etc := root.Entries["etc"]
	if etc != nil && etc.Kind == fstree.KindDir && len(etc.Entries) > 0 {
		if usrEtc != nil {
			return errors.New("the commit has both /etc and /usr/etc")
		}
		usr.Entries["etc"] = etc
		usrEtc = etc
	}
	if usrEtc == nil || usrEtc.Kind != fstree.KindDir {
		return errors.New("the commit has no /usr/etc directory")
	}
	newEtc := copyAll(usrEtc)
	delete(newEtc.Entries, ".updated")
	root.Entries["etc"] = newEtc
	delete(root.Entries, ".updated")
	return nil
}

type kernel struct {
	version    string
	vmlinuz    *fstree.Inode
	initramfs  *fstree.Inode
	hmac       *fstree.Inode
	devicetree *fstree.Inode
	dtb        *fstree.Inode
}

// resolve follows symlinks inside the tree (the way stat would from the
// deployment root) and returns the inode p names.
func resolve(t *fstree.Tree, p string) (*fstree.Inode, error) {
	for hops := 0; hops < 40; hops++ {
		comps := strings.Split(strings.Trim(p, "/"), "/")
		cur := t.Root
		var walked []string
		for i, c := range comps {
			if c == "" || c == "." {
				continue
			}
			if c == ".." {
				if len(walked) > 0 {
					walked = walked[:len(walked)-1]
				}
				var err error
				if cur, err = t.Lookup(strings.Join(walked, "/")); err != nil {
					return nil, err
				}
				continue
			}
			if cur.Kind != fstree.KindDir {
				return nil, fmt.Errorf("%s: not a directory", p)
			}
			next, ok := cur.Entries[c]
			if !ok {
				return nil, fstree.ErrNotExist
			}
			if next.Kind == fstree.KindSymlink {
				tgt := next.Target
				if !strings.HasPrefix(tgt, "/") {
					tgt = strings.Join(walked, "/") + "/" + tgt
				}
				p = tgt + "/" + strings.Join(comps[i+1:], "/")
				goto again
			}
			walked = append(walked, c)
			cur = next
		}
		return cur, nil
	again:
	}
	return nil, errors.New("too many levels of symbolic links")
}

// findKernel finds the one kernel under usr/lib/modules: a directory
// with a regular vmlinuz (get_kernel_from_tree_usrlib_modules).
func findKernel(t *fstree.Tree) (*kernel, error) {
	mods, err := t.Lookup("usr/lib/modules")
	if err != nil || mods.Kind != fstree.KindDir {
		return nil, errors.New("no kernel found: the commit has no usr/lib/modules directory")
	}
	var found []*kernel
	for _, kver := range mods.SortedNames() {
		if mods.Entries[kver].Kind != fstree.KindDir {
			continue
		}
		dir := "usr/lib/modules/" + kver + "/"
		vm, err := resolve(t, dir+"vmlinuz")
		if err != nil || vm.Kind != fstree.KindRegular {
			continue
		}
		k := &kernel{version: kver, vmlinuz: vm}
		for _, n := range []string{"initramfs.img", "initramfs"} {
			if ino, err := resolve(t, dir+n); err == nil && ino.Kind == fstree.KindRegular {
				k.initramfs = ino
				break
			}
		}
		if ino, err := resolve(t, dir+".vmlinuz.hmac"); err == nil && ino.Kind == fstree.KindRegular {
			k.hmac = ino
		}
		if ino, err := resolve(t, dir+"devicetree"); err == nil && ino.Kind == fstree.KindRegular {
			k.devicetree = ino
		} else if ino, err := resolve(t, dir+"dtb"); err == nil && ino.Kind == fstree.KindDir {
			k.dtb = ino
		}
		found = append(found, k)
	}
	switch len(found) {
	case 0:
		return nil, errors.New("no kernel found: no usr/lib/modules/<version>/vmlinuz in the commit")
	case 1:
		return found[0], nil
	}
	var vers []string
	for _, k := range found {
		vers = append(vers, k.version)
	}
	return nil, fmt.Errorf("found %d kernels under usr/lib/modules (%s); the image must hold exactly one", len(found), strings.Join(vers, ", "))
}

// bootcsum is sha256 over vmlinuz, initramfs, and devicetree or every
// file below dtb/.
func (k *kernel) bootcsum() (string, error) {
	h := sha256.New()
	files := []*fstree.Inode{k.vmlinuz}
	if k.initramfs != nil {
		files = append(files, k.initramfs)
	}
	if k.devicetree != nil {
		files = append(files, k.devicetree)
	} else if k.dtb != nil {
		_ = (&fstree.Tree{Root: k.dtb}).Walk(func(_ string, ino *fstree.Inode) error {
			if ino.Kind == fstree.KindRegular {
				files = append(files, ino)
			}
			return nil
		})
	}
	for _, f := range files {
		if f.Content == nil {
			continue
		}
		rc, err := f.Content.Open()
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// bootTitle is PRETTY_NAME (or ID) from usr/lib/os-release, falling back
// to etc/os-release.
func bootTitle(t *fstree.Tree) (string, error) {
	for _, p := range []string{"usr/lib/os-release", "etc/os-release"} {
		ino, err := resolve(t, p)
		if err != nil || ino.Kind != fstree.KindRegular || ino.Content == nil {
			continue
		}
		if ino.Size() > 1<<20 {
			return "", fmt.Errorf("%s is too large", p)
		}
		rc, err := ino.Content.Open()
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", p, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", p, err)
		}
		vals := parseOSRelease(b)
		if v := vals["PRETTY_NAME"]; v != "" {
			return v, nil
		}
		if v := vals["ID"]; v != "" {
			return v, nil
		}
		return "", fmt.Errorf("no PRETTY_NAME or ID in %s", p)
	}
	return "", errors.New("the commit has no usr/lib/os-release or etc/os-release")
}

func parseOSRelease(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		out[k] = shellUnquote(v)
	}
	return out
}

// shellUnquote removes shell quoting as g_shell_unquote does for the
// forms os-release uses.
func shellUnquote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				b.WriteString(s[i+1:])
				return b.String()
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
				}
				b.WriteByte(s[i])
			}
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// alephJSON is the .aleph-version.json osbuild's org.osbuild.ostree.aleph
// writes for a container deployment (sorted keys, 4-space indent).
func alephJSON(imp *ImportResult, imageRef string) (string, error) {
	name := imageRef
	if tr, rest, ok := strings.Cut(imageRef, ":"); ok {
		name = rest
		if tr == "ostree-remote-registry" || tr == "ostree-remote-image" {
			if _, r2, ok := strings.Cut(rest, ":"); ok {
				name = r2
			}
		}
	}
	labels := imp.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	data := map[string]any{
		"ref":     imageRef,
		"version": labels["org.opencontainers.image.version"],
		"container-image": map[string]any{
			"image-name":   name,
			"image-digest": imp.ConfigDigest,
			"image-labels": labels,
		},
	}
	if c, ok := labels[LabelCommit]; ok {
		data["ostree-commit"] = c
	}
	b, err := json.MarshalIndent(data, "", "    ")
	if err != nil {
		return "", fmt.Errorf("writing aleph file: %w", err)
	}
	return string(b) + "\n", nil
}
