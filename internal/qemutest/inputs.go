package qemutest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// CacheDir is where downloaded test inputs are kept between runs:
// $SCOS_TEST_CACHE, else /var/tmp/scos-builder-test-cache.
func CacheDir() string {
	if d := os.Getenv("SCOS_TEST_CACHE"); d != "" {
		return d
	}
	return "/var/tmp/scos-builder-test-cache"
}

var kernelDepRE = regexp.MustCompile(`(?m)^\s*Depends:\s*(linux-image-[0-9]\S*)`)

// kernelModuleDirs are the parts of the kernel package's module tree the
// test initramfs may need: storage (ATA, SCSI disk and CD), loop, ISO 9660,
// squashfs, and the CRC helpers sd_mod depends on.
var kernelModuleDirs = []string{
	"kernel/drivers/ata/", "kernel/drivers/scsi/", "kernel/drivers/cdrom/", "kernel/drivers/block/",
	"kernel/fs/isofs/", "kernel/fs/squashfs/", "kernel/crypto/", "kernel/lib/", "kernel/block/", "kernel/arch/x86/crypto/",
}

// Kernel is an unpacked Debian kernel: the image and part of its modules.
type Kernel struct {
	Vmlinuz string
	// ModulesDir is lib/modules/<version> (only kernelModuleDirs).
	ModulesDir string
}

// DebianKernel returns a Debian amd64 kernel. The first call resolves
// linux-image-amd64 with apt-cache, downloads the package with apt-get
// download (never installs it) and unpacks the kernel and the modules a
// live test needs into cacheDir/kernel/; later calls reuse them.
func DebianKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	dir := filepath.Join(cacheDir, "kernel")
	done := filepath.Join(dir, "complete")
	if data, err := os.ReadFile(done); err == nil {
		return &Kernel{Vmlinuz: filepath.Join(dir, "vmlinuz"), ModulesDir: filepath.Join(dir, strings.TrimSpace(string(data)))}, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "linux-image-amd64").Output()
	if err != nil {
		return nil, fmt.Errorf("resolving linux-image-amd64 with apt-cache: %w (run apt-get update)", err)
	}
	m := kernelDepRE.FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("resolving linux-image-amd64: no linux-image-N dependency in %q", out)
	}
	pkg := string(m[1])
	dl, err := os.MkdirTemp(dir, "download-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dl)
	get := exec.CommandContext(ctx, "apt-get", "download", pkg)
	get.Dir = dl
	if out, err := get.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("downloading %s with apt-get download: %w: %s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("downloading %s: expected one .deb, found %d", pkg, len(debs))
	}
	tarData, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", debs[0]).Output()
	if err != nil {
		return nil, fmt.Errorf("unpacking %s: %w", debs[0], err)
	}
	k := &Kernel{}
	var modRel string
	tr := tar.NewReader(bytes.NewReader(tarData))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("unpacking %s: %w", debs[0], err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || strings.Contains(name, "..") {
			continue
		}
		var target string
		switch {
		case strings.HasPrefix(name, "boot/vmlinuz-"):
			target = filepath.Join(dir, "vmlinuz")
			k.Vmlinuz = target
		case strings.HasPrefix(name, "lib/modules/") && strings.HasSuffix(name, ".ko"):
			parts := strings.SplitN(name, "/", 4) // lib modules <version> rest
			if len(parts) != 4 || !hasAnyPrefix(parts[3], kernelModuleDirs) {
				continue
			}
			modRel = filepath.Join("lib/modules", parts[2])
			target = filepath.Join(dir, filepath.FromSlash(name))
		default:
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(target)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	if k.Vmlinuz == "" || modRel == "" {
		return nil, fmt.Errorf("unpacking %s: no boot/vmlinuz-* or no modules", debs[0])
	}
	k.ModulesDir = filepath.Join(dir, modRel)
	return k, os.WriteFile(done, []byte(modRel+"\n"), 0o644)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ModuleLoadOrder returns the module files (relative to ModulesDir) to
// insmod, dependencies first, for the named modules. Dependencies come
// from each module's .modinfo "depends=" field, so no depmod is needed.
func (k *Kernel) ModuleLoadOrder(names ...string) ([]string, error) {
	norm := func(n string) string { return strings.ReplaceAll(n, "-", "_") }
	index := map[string]string{}
	err := filepath.WalkDir(k.ModulesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".ko") {
			rel, _ := filepath.Rel(k.ModulesDir, p)
			index[norm(strings.TrimSuffix(d.Name(), ".ko"))] = rel
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string) error
	visit = func(name string) error {
		name = norm(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		rel, ok := index[name]
		if !ok {
			return fmt.Errorf("module %s not in %s", name, k.ModulesDir)
		}
		state[name] = 1
		deps, err := moduleDepends(filepath.Join(k.ModulesDir, rel))
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, rel)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading module %s: %w", p, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

// CpioEntry is one member of a newc archive.
type CpioEntry struct {
	Name  string // without leading "/"
	Mode  uint32 // full st_mode, e.g. 0o100755, 0o40755, 0o20600
	Data  []byte
	Major uint32 // device numbers for character/block devices
	Minor uint32
}

// WriteNewc writes entries as an uncompressed newc cpio archive (owner 0,
// mtime 0), in the order given, with the trailer.
func WriteNewc(w io.Writer, entries []CpioEntry) error {
	pad := func(n int) []byte { return make([]byte, (4-n%4)%4) }
	write := func(ino int, e CpioEntry) error {
		name := e.Name + "\x00"
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, e.Mode, 0, 0, 1, 0, len(e.Data), 0, 0, e.Major, e.Minor, len(name), 0)
		if _, err := io.WriteString(w, hdr+name); err != nil {
			return err
		}
		if _, err := w.Write(pad(len(hdr) + len(name))); err != nil {
			return err
		}
		if _, err := w.Write(e.Data); err != nil {
			return err
		}
		_, err := w.Write(pad(len(e.Data)))
		return err
	}
	for i, e := range entries {
		if err := write(i+1, e); err != nil {
			return err
		}
	}
	return write(0, CpioEntry{Name: "TRAILER!!!"})
}

// BusyboxInitramfs writes a gzip-compressed initramfs holding the host's
// static busybox as /bin/busybox, /dev/console and the given /init script
// (plus extra files, e.g. kernel modules).
func BusyboxInitramfs(out, initScript string, extra map[string][]byte) error {
	bb, err := findStaticBusybox()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	entries := []CpioEntry{
		{Name: "bin", Mode: 0o40755},
		{Name: "bin/busybox", Mode: 0o100755, Data: data},
		{Name: "dev", Mode: 0o40755},
		{Name: "dev/console", Mode: 0o20600, Major: 5, Minor: 1},
		{Name: "init", Mode: 0o100755, Data: []byte(initScript)},
		{Name: "proc", Mode: 0o40755},
		{Name: "sys", Mode: 0o40755},
		{Name: "mnt", Mode: 0o40755},
	}
	names := make([]string, 0, len(extra))
	for n := range extra {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{"bin": true, "dev": true, "proc": true, "sys": true, "mnt": true}
	for _, n := range names {
		parts := strings.Split(n, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, CpioEntry{Name: d, Mode: 0o40755})
			}
		}
		entries = append(entries, CpioEntry{Name: n, Mode: 0o100644, Data: extra[n]})
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := WriteNewc(zw, entries); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// findStaticBusybox returns Debian's busybox-static binary: an ELF file
// without an interpreter, so it runs in an initramfs with no libc.
func findStaticBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p, nil
		}
	}
	return "", errors.New("finding a static busybox: not found (install the Debian package \"busybox-static\")")
}
