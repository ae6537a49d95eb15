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

// DebianKernel returns the path of a Debian amd64 kernel (vmlinuz). The
// first call resolves linux-image-amd64 with apt-cache, downloads the
// package with apt-get download (never installs it) and extracts the
// kernel into cacheDir/kernel/; later calls reuse it.
func DebianKernel(ctx context.Context, cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "kernel")
	vmlinuz := filepath.Join(dir, "vmlinuz")
	if fileExists(vmlinuz) {
		return vmlinuz, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "linux-image-amd64").Output()
	if err != nil {
		return "", fmt.Errorf("resolving linux-image-amd64 with apt-cache: %w (run apt-get update)", err)
	}
	m := kernelDepRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("resolving linux-image-amd64: no linux-image-N dependency in %q", out)
	}
	pkg := string(m[1])
	dl, err := os.MkdirTemp(dir, "download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dl)
	get := exec.CommandContext(ctx, "apt-get", "download", pkg)
	get.Dir = dl
	if out, err := get.CombinedOutput(); err != nil {
		return "", fmt.Errorf("downloading %s with apt-get download: %w: %s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("downloading %s: expected one .deb, found %d", pkg, len(debs))
	}
	tarData, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", debs[0]).Output()
	if err != nil {
		return "", fmt.Errorf("unpacking %s: %w", debs[0], err)
	}
	tr := tar.NewReader(bytes.NewReader(tarData))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("unpacking %s: no boot/vmlinuz-*", debs[0])
		}
		if err != nil {
			return "", fmt.Errorf("unpacking %s: %w", debs[0], err)
		}
		if h.Typeflag == tar.TypeReg && strings.HasPrefix(strings.TrimPrefix(h.Name, "./"), "boot/vmlinuz-") {
			tmp := vmlinuz + ".tmp"
			f, err := os.Create(tmp)
			if err != nil {
				return "", err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return "", err
			}
			if err := f.Close(); err != nil {
				return "", err
			}
			return vmlinuz, os.Rename(tmp, vmlinuz)
		}
	}
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
