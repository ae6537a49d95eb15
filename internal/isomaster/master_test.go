package isomaster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/bootconfig"
	"github.com/okd-project/scos-builder/internal/bootconfig/bootconfigtest"
	"github.com/okd-project/scos-builder/internal/testutil"
)

const testEpoch = 1700000000

// liveInputs are the pxeboot files a tree is built from.
type liveInputs struct{ kernel, initramfs, rootfs string }

// smallInputs are stand-ins for tests that do not boot.
func smallInputs(t *testing.T) liveInputs {
	t.Helper()
	dir := t.TempDir()
	in := liveInputs{filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img"), ""}
	for _, p := range []string{in.kernel, in.initramfs} {
		if err := os.WriteFile(p, []byte("test "+filepath.Base(p)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in.rootfs = bootconfigtest.Rootfs(t, dir, "small")
	return in
}

// buildISO lays out a tree from a test source tree and masters it.
func buildISO(t *testing.T, arch string, in liveInputs, kargs []string) (string, *bootconfig.Result, *Result) {
	t.Helper()
	testutil.RequireTool(t, "xorriso", "mformat", "mcopy", "mmd")
	root := bootconfigtest.SourceTree(t, bootconfigtest.Options{EFI: bootconfigtest.EFIUsrLib, Arch: arch, ExtraKargs: kargs})
	work := t.TempDir()
	tree := filepath.Join(work, "tree")
	res, err := bootconfig.Build(context.Background(), bootconfig.Options{
		SourceRoot: root, TreeDir: tree, WorkDir: filepath.Join(work, "scratch"), Arch: arch,
		Kernel: in.kernel, Initramfs: in.initramfs, Rootfs: in.rootfs,
		OSName: "scos", Version: "9.0.20260101-0", SourceDateEpoch: testEpoch,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "live.iso")
	mr, err := Master(context.Background(), tree, out, Options{
		Arch: arch, VolumeID: res.VolumeID, VolumeSet: res.VolumeSet,
		IsohybridMBR: res.Syslinux[bootconfig.IsohybridMBRFile], SourceDateEpoch: testEpoch,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, res, mr
}

// isoEntry is a file in the primary (ISO 9660) directory tree.
type isoEntry struct {
	extent int64
	size   int64
}

var isoinfoEntryRE = regexp.MustCompile(`^\S{10}\s+\d+\s+\d+\s+\d+\s+(\d+)\s+.*\[\s*(\d+)\s+\d+\]\s+(\S+)\s*$`)

// primaryNames lists the primary tree as isoinfo -l shows it: "/DIR/NAME;1".
func primaryNames(t *testing.T, iso string) map[string]isoEntry {
	t.Helper()
	out, err := exec.Command("isoinfo", "-l", "-i", iso).CombinedOutput()
	if err != nil {
		t.Fatalf("isoinfo -l: %v: %s", err, out)
	}
	entries := map[string]isoEntry{}
	dir := ""
	for _, line := range strings.Split(string(out), "\n") {
		if d, ok := strings.CutPrefix(line, "Directory listing of "); ok {
			dir = strings.TrimSpace(d)
			continue
		}
		m := isoinfoEntryRE.FindStringSubmatch(line)
		if m == nil || m[3] == "." || m[3] == ".." {
			continue
		}
		size, _ := strconv.ParseInt(m[1], 10, 64)
		extent, _ := strconv.ParseInt(m[2], 10, 64)
		entries[dir+m[3]] = isoEntry{extent: extent, size: size}
	}
	return entries
}

func TestMasterX86(t *testing.T) {
	testutil.RequireTool(t, "isoinfo")
	iso, res, mr := buildISO(t, "x86_64", smallInputs(t), []string{"mitigations=auto,nosmt"})
	data, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if mr.SHA256 != hex.EncodeToString(sum[:]) || mr.Size != int64(len(data)) {
		t.Errorf("result %+v does not match the file", mr)
	}

	// The 8.3 names coreos-installer looks up.
	names := primaryNames(t, iso)
	for _, p := range []string{"/COREOS/IGNINFO.JSO;1", "/COREOS/KARGS.JSO;1", "/COREOS/FEATURES.JSO;1", "/COREOS/MINISO.DAT;1",
		"/IMAGES/IGNITION.IMG;1", "/IMAGES/EFIBOOT.IMG;1", "/IMAGES/PXEBOOT/VMLINUZ.;1", "/IMAGES/PXEBOOT/INITRD.IMG;1", "/IMAGES/PXEBOOT/ROOTFS.IMG;1",
		"/ISOLINUX/ISOLINUX.BIN;1", "/ISOLINUX/ISOLINUX.CFG;1", "/ISOLINUX/BOOT.CAT;1", "/ISOLINUX/LDLINUX.C32;1", "/EFI/DEBIAN/GRUB.CFG;1"} {
		if _, ok := names[p]; !ok {
			t.Errorf("primary tree lacks %s", p)
		}
	}

	// Volume ID: 32 space-padded bytes at 32808, where assisted-image-service reads it.
	if got, want := string(data[32808:32808+32]), res.VolumeID+strings.Repeat(" ", 32-len(res.VolumeID)); got != want {
		t.Errorf("volume ID field = %q, want %q", got, want)
	}
	out, err := exec.Command("isoinfo", "-d", "-i", iso).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Volume id: " + res.VolumeID, "Volume set id: " + res.VolumeSet, "System id: LINUX", "Joliet with UCS level 3 found", "Rock Ridge signatures version 1 found"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("isoinfo -d lacks %q:\n%s", want, out)
		}
	}
	// Rock Ridge keeps the real names.
	out, err = exec.Command("isoinfo", "-R", "-f", "-i", iso).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/coreos/igninfo.json") || !strings.Contains(string(out), "/images/pxeboot/vmlinuz") {
		t.Errorf("Rock Ridge names: %v: %s", err, out)
	}

	// Boot records and system area.
	out, err = exec.Command("xorriso", "-indev", iso, "-report_el_torito", "plain", "-report_system_area", "plain").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso report: %v: %s", err, out)
	}
	report := string(out)
	for _, re := range []string{
		`El Torito cat path : /isolinux/boot.cat`,
		`El Torito boot img :\s+1\s+BIOS\s+y\s+none\s+0x0000\s+0x00\s+4\s`,
		`El Torito boot img :\s+2\s+UEFI\s+y\s+none`,
		`El Torito img path :\s+1\s+/isolinux/isolinux.bin`,
		`El Torito img opts :\s+1\s+boot-info-table`,
		`El Torito img path :\s+2\s+/images/efiboot.img`,
		`System area summary: MBR isohybrid .*GPT`,
		`MBR partition      :\s+1\s+0x80\s+0x00\s+0\s`,
		`MBR partition path :\s+2\s+/images/efiboot.img`,
		`GPT partition path :\s+\d+\s+/images/efiboot.img`,
	} {
		if !regexp.MustCompile(re).MatchString(report) {
			t.Errorf("xorriso report lacks %s:\n%s", re, report)
		}
	}

	// Embed areas, found the way coreos-installer finds them.
	kjEntry := names["/COREOS/KARGS.JSO;1"]
	var kj bootconfig.KargsJSON
	if err := json.Unmarshal(data[kjEntry.extent*2048:kjEntry.extent*2048+kjEntry.size], &kj); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(kj.Default, "coreos.liveiso="+res.VolumeID) || len(kj.Files) != 2 {
		t.Fatalf("kargs.json = %+v", kj)
	}
	for _, f := range kj.Files {
		e, ok := names["/"+strings.ToUpper(f.Path)+";1"]
		if !ok {
			t.Fatalf("kargs.json path %s not in the primary tree", f.Path)
		}
		at := e.extent*2048 + int64(f.Offset)
		area := string(data[at : at+int64(kj.Size)])
		if want := kj.Default + "\n" + strings.Repeat("#", kj.Size-len(kj.Default)-1); area != want {
			t.Errorf("%s: area at ISO byte %d = %.60q...", f.Path, at, area)
		}
		if next := string(data[at+int64(kj.Size) : at+int64(kj.Size)+25]); next != "# COREOS_KARG_EMBED_AREA\n" {
			t.Errorf("%s: after the area: %q", f.Path, next)
		}
	}
	ign := names["/IMAGES/IGNITION.IMG;1"]
	if ign.size != 262144 || !bytes.Equal(data[ign.extent*2048:ign.extent*2048+ign.size], make([]byte, 262144)) {
		t.Errorf("ignition.img: %d bytes at extent %d, not all zero", ign.size, ign.extent)
	}
	var igninfo map[string]any
	ii := names["/COREOS/IGNINFO.JSO;1"]
	if err := json.Unmarshal(data[ii.extent*2048:ii.extent*2048+ii.size], &igninfo); err != nil || igninfo["file"] != "images/ignition.img" {
		t.Errorf("igninfo.json = %v (%v)", igninfo, err)
	}
	rootfs := names["/IMAGES/PXEBOOT/ROOTFS.IMG;1"]
	if got := string(data[rootfs.extent*2048+124 : rootfs.extent*2048+128]); got != "hsqs" {
		t.Errorf("rootfs.img in the ISO has %q at byte 124", got)
	}
}

func TestMasterAarch64(t *testing.T) {
	testutil.RequireTool(t, "isoinfo")
	iso, _, _ := buildISO(t, "aarch64", smallInputs(t), nil)
	names := primaryNames(t, iso)
	if _, ok := names["/BOOT.CAT;1"]; !ok {
		t.Errorf("no visible /boot.catalog: %v", names)
	}
	if _, ok := names["/ISOLINUX/ISOLINUX.BIN;1"]; ok {
		t.Error("aarch64 ISO has isolinux")
	}
	out, err := exec.Command("xorriso", "-indev", iso, "-report_el_torito", "plain").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	report := string(out)
	if !strings.Contains(report, "El Torito cat path : /boot.catalog") ||
		!regexp.MustCompile(`El Torito boot img :\s+1\s+UEFI`).MatchString(report) || strings.Contains(report, "BIOS") {
		t.Errorf("aarch64 El Torito:\n%s", report)
	}
}

// TestMasterIsReproducible builds two trees from the same inputs and
// masters each: the ISOs must be identical.
func TestMasterIsReproducible(t *testing.T) {
	in := smallInputs(t)
	_, _, a := buildISO(t, "x86_64", in, nil)
	_, _, b := buildISO(t, "x86_64", in, nil)
	if a.SHA256 != b.SHA256 {
		t.Errorf("two builds differ: %s and %s", a.SHA256, b.SHA256)
	}
}

func TestMasterWithoutXorriso(t *testing.T) {
	noTools := func(string) (string, error) { return "", exec.ErrNotFound }
	_, err := Master(context.Background(), t.TempDir(), filepath.Join(t.TempDir(), "x.iso"), Options{Arch: "x86_64", VolumeID: "scos-1", LookPath: noTools})
	if err == nil || !strings.Contains(err.Error(), `install the Debian or Fedora package "xorriso"`) {
		t.Errorf("error = %v", err)
	}
}

func TestMasterFailureLeavesNoOutput(t *testing.T) {
	testutil.RequireTool(t, "xorriso")
	tree := t.TempDir()
	out := filepath.Join(t.TempDir(), "x.iso")
	// No boot files: Args refuses before xorriso runs.
	if _, err := Master(context.Background(), tree, out, Options{Arch: "x86_64", VolumeID: "scos-1", IsohybridMBR: "/nonexistent"}); err == nil {
		t.Fatal("mastering a tree without isolinux succeeded")
	}
	// xorriso itself fails: the MBR file does not exist.
	if err := os.MkdirAll(filepath.Join(tree, "isolinux"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "isolinux/isolinux.bin"), make([]byte, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Master(context.Background(), tree, out, Options{Arch: "x86_64", VolumeID: "scos-1", IsohybridMBR: "/nonexistent/isohdpfx.bin"})
	if err == nil || !strings.Contains(err.Error(), "running xorriso") {
		t.Fatalf("error = %v", err)
	}
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 0 {
		t.Errorf("failed mastering left %v", ents)
	}
}
