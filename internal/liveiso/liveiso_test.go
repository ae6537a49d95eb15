package liveiso

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/liveiso/liveisotest"
	"github.com/okd-project/scos-builder/internal/testutil"
)

const testConfig = `{"ignition": {"version": "3.0.0"}}` + "\n"

func sha(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustOpen(t testing.TB, path string, rw bool) *ISO {
	t.Helper()
	var iso *ISO
	var err error
	if rw {
		iso, err = OpenForUpdate(path)
	} else {
		iso, err = Open(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iso.Close() })
	return iso
}

// readAt returns n bytes of the file at off.
func readAt(t testing.TB, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// Offsets of the 2023-07 x86_64 ISO equal those measured with isoinfo.
func TestOffsetsMatchIsoinfo(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	ref := testutil.SharedFixtures(t, "live-iso/fcos-38-x86_64/embed-area-offsets.txt")
	iso := mustOpen(t, fx.Path, false)
	f, err := os.Open(ref)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fileRE := regexp.MustCompile(`^(\S+): lba=(\d+) size=(\d+) iso_offset=(\d+)$`)
	kargRE := regexp.MustCompile(`^(\S+): file_offset=(\d+) iso_offset=(\d+) length=(\d+)$`)
	ignRE := regexp.MustCompile(`^# ignition embed area: (\S+) iso_offset=(\d+) length=(\d+)$`)
	kargs := map[string]KargsArea{}
	for _, a := range iso.Kargs.Areas {
		kargs[a.File] = a
	}
	checked := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
		if m := fileRE.FindStringSubmatch(line); m != nil {
			r, err := iso.fs.lookup(primaryName(m[1]))
			if err != nil {
				t.Errorf("%s: %v", m[1], err)
				continue
			}
			if r.offset() != num(m[4]) || (!r.dir && int64(r.length) != num(m[3])) {
				t.Errorf("%s: offset %d length %d, isoinfo says %s", m[1], r.offset(), r.length, line)
			}
			checked++
		} else if m := kargRE.FindStringSubmatch(line); m != nil {
			a, ok := kargs[m[1]]
			if !ok || a.FileOffset != num(m[2]) || a.Offset != num(m[3]) || int64(iso.Kargs.Size) != num(m[4]) {
				t.Errorf("karg area %+v (size %d), reference %s", a, iso.Kargs.Size, line)
			}
			checked++
		} else if m := ignRE.FindStringSubmatch(line); m != nil {
			if iso.Ignition.File != m[1] || iso.Ignition.Offset != num(m[2]) || iso.Ignition.Length != num(m[3]) {
				t.Errorf("Ignition area %+v, reference %s", iso.Ignition, line)
			}
			checked++
		}
	}
	if checked != 23 {
		t.Errorf("checked %d reference lines, want 23", checked)
	}
	if iso.VolumeID != "fedora-coreos-38.20230718.dev.0" {
		t.Errorf("volume ID %q", iso.VolumeID)
	}
	if iso.Features == nil || !iso.Features.InstallerConfig || !iso.Features.LiveInitrdNetwork || !iso.Features.InstallerConfigDirectives["console"] {
		t.Errorf("features %+v", iso.Features)
	}
	boot, err := iso.BootEntries()
	if err != nil {
		t.Fatal(err)
	}
	if len(boot) != 2 || boot[0].Platform != "bios" || boot[0].File != "ISOLINUX/ISOLINUX.BIN" || boot[0].LoadSectors != 4 ||
		boot[1].Platform != "uefi" || boot[1].File != "IMAGES/EFIBOOT.IMG" || !boot[0].Bootable {
		t.Errorf("El Torito entries %+v", boot)
	}
}

// primaryName is the 8.3 name genisoimage gives a path: uppercase,
// extensions cut to 3 characters.
func primaryName(p string) string {
	parts := strings.Split(strings.ToUpper(p), "/")
	for i, c := range parts {
		if dot := strings.LastIndexByte(c, '.'); dot >= 0 && len(c)-dot-1 > 3 {
			parts[i] = c[:dot+4]
		}
	}
	return strings.Join(parts, "/")
}

// The s390x ISO's area is the range igninfo.json gives inside cdboot.img.
func TestS390xIgninfo(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.s390x")
	iso := mustOpen(t, fx.Path, false)
	cd, err := iso.Stat("IMAGES/CDBOOT.IMG")
	if err != nil {
		t.Fatal(err)
	}
	want := IgnitionArea{File: "images/cdboot.img", FileOffset: 132096, Offset: cd.Offset + 132096, Length: 262144}
	if iso.Ignition != want {
		t.Errorf("Ignition area %+v, want %+v", iso.Ignition, want)
	}
	if iso.Kargs == nil || len(iso.Kargs.Areas) != 1 || iso.Kargs.Size != 896 {
		t.Fatalf("kargs %+v", iso.Kargs)
	}
	a := iso.Kargs.Areas[0]
	if a.File != "images/cdboot.img" || a.Offset != cd.Offset+66688 || a.Pad != "\x00" || a.End != "\x00" {
		t.Errorf("karg area %+v", a)
	}
	if iso.Kargs.Current != iso.Kargs.Default {
		t.Errorf("kargs %q differ from default %q", iso.Kargs.Current, iso.Kargs.Default)
	}
	// Writing touches only the range inside cdboot.img.
	before, _ := os.ReadFile(fx.Path)
	iso2 := mustOpen(t, fx.Path, true)
	if err := iso2.EmbedIgnition([]byte(testConfig), false); err != nil {
		t.Fatal(err)
	}
	if err := iso2.Save(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(fx.Path)
	for i := range before {
		if before[i] != after[i] && (int64(i) < want.Offset || int64(i) >= want.Offset+want.Length) {
			t.Fatalf("byte %d outside the area changed", i)
		}
	}
}

// embed then show returns the config byte for byte; remove, and embed then
// remove, restore the original file; in place, as a copy and streamed.
func TestIgnitionRoundTrip(t *testing.T) {
	for _, fx := range liveisotest.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			orig := sha(t, fx.Path)
			iso := mustOpen(t, fx.Path, false)
			if _, ok := iso.IgnitionConfig(); ok || !iso.Initrd().Empty() {
				t.Fatal("fixture already customized")
			}
			// remove on a pristine ISO changes nothing
			if err := iso.RemoveIgnition(); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := iso.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			if s := sha256.Sum256(buf.Bytes()); hex.EncodeToString(s[:]) != orig {
				t.Error("remove on a pristine ISO changed it")
			}

			// embed as a copy
			out := filepath.Join(t.TempDir(), "out.iso")
			if err := iso.EmbedIgnition([]byte(testConfig), false); err != nil {
				t.Fatal(err)
			}
			if err := iso.SaveAs(context.Background(), out); err != nil {
				t.Fatal(err)
			}
			if sha(t, fx.Path) != orig {
				t.Fatal("SaveAs changed the input")
			}
			if err := iso.SaveAs(context.Background(), out); !errors.Is(err, os.ErrExist) {
				t.Errorf("SaveAs over an existing file: %v", err)
			}
			copied := sha(t, out)
			got := mustOpen(t, out, false)
			if cfg, ok := got.IgnitionConfig(); !ok || string(cfg) != testConfig {
				t.Fatalf("show after embed: %q, %v", cfg, ok)
			}

			// embed in place gives the same bytes as the copy
			rw := mustOpen(t, fx.Path, true)
			if err := rw.EmbedIgnition([]byte(testConfig), false); err != nil {
				t.Fatal(err)
			}
			if err := rw.Save(); err != nil {
				t.Fatal(err)
			}
			if sha(t, fx.Path) != copied {
				t.Error("in-place embed differs from the copy")
			}
			rw2 := mustOpen(t, fx.Path, true)
			if err := rw2.EmbedIgnition([]byte(testConfig), false); !errors.Is(err, ErrAlreadyEmbedded) {
				t.Errorf("second embed without force: %v", err)
			}
			if err := rw2.EmbedIgnition([]byte(`{"ignition":{"version":"3.4.0"}}`), true); err != nil {
				t.Fatal(err)
			}
			if err := rw2.Save(); err != nil {
				t.Fatal(err)
			}
			if cfg, _ := mustOpen(t, fx.Path, false).IgnitionConfig(); string(cfg) != `{"ignition":{"version":"3.4.0"}}` {
				t.Errorf("show after forced embed: %q", cfg)
			}

			// remove in place restores the original
			rw3 := mustOpen(t, fx.Path, true)
			if err := rw3.RemoveIgnition(); err != nil {
				t.Fatal(err)
			}
			if err := rw3.Save(); err != nil {
				t.Fatal(err)
			}
			if sha(t, fx.Path) != orig {
				t.Error("embed + remove did not restore the original sha256")
			}
		})
	}
}

// Real tools read what we embed: xz reports a CRC32 check, cpio lists the
// members with their parent directories in order.
func TestEmbeddedArchiveWithRealTools(t *testing.T) {
	testutil.RequireTool(t, "xz", "cpio")
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	iso := mustOpen(t, fx.Path, true)
	in := &Initrd{Members: map[string][]byte{
		IgnitionMember: []byte(testConfig),
		"etc/coreos-firstboot-network/eth0.nmconnection": []byte("[connection]\n"),
	}}
	if err := iso.SetInitrd(in); err != nil {
		t.Fatal(err)
	}
	if err := iso.Save(); err != nil {
		t.Fatal(err)
	}
	area := readAt(t, fx.Path, iso.Ignition.Offset, iso.Ignition.Length)
	dir := t.TempDir()
	img := filepath.Join(dir, "ignition.img")
	os.WriteFile(img, area, 0o644)
	info, err := exec.Command("xz", "--robot", "-lvv", img).CombinedOutput()
	if err != nil || !strings.Contains(string(info), "CRC32") || strings.Contains(string(info), "CRC64") {
		t.Errorf("xz -lvv: %v\n%s", err, info)
	}
	cmd := exec.Command("sh", "-c", "xz -dc ignition.img | cpio -itv --quiet")
	cmd.Dir = dir
	list, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("xz | cpio -t: %v\n%s", err, list)
	}
	var names, modes []string
	for _, l := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(l)
		modes = append(modes, f[0])
		names = append(names, f[len(f)-1])
	}
	wantNames := []string{"config.ign", "etc", "etc/coreos-firstboot-network", "etc/coreos-firstboot-network/eth0.nmconnection"}
	wantModes := []string{"-rw-------", "drwxr-xr-x", "drwxr-xr-x", "-rw-------"}
	if strings.Join(names, " ") != strings.Join(wantNames, " ") || strings.Join(modes, " ") != strings.Join(wantModes, " ") {
		t.Errorf("cpio -tv:\n%s", list)
	}
	cmd = exec.Command("sh", "-c", "xz -dc ignition.img | cpio -i --to-stdout --quiet config.ign")
	cmd.Dir = dir
	if cfg, err := cmd.Output(); err != nil || string(cfg) != testConfig {
		t.Errorf("config.ign extracted with cpio: %q, %v", cfg, err)
	}
	// The kernel's own decoder (xz-embedded, as in busybox unxz) reads the
	// stream; it does not skip padding, so it gets the stream alone.
	testutil.RequireTool(t, "busybox")
	n, err := xzStreamSize(area)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range area[n:] {
		if c != 0 {
			t.Fatal("non-zero byte after the xz stream")
		}
	}
	os.WriteFile(img, area[:n], 0o644)
	cmd = exec.Command("sh", "-c", "busybox unxz -c ignition.img | busybox cpio -i --to-stdout config.ign")
	cmd.Dir = dir
	if cfg, err := cmd.Output(); err != nil || string(cfg) != testConfig {
		t.Errorf("config.ign through busybox unxz: %q, %v", cfg, err)
	}

	// Embedding a new config keeps the network keyfile.
	iso2 := mustOpen(t, fx.Path, true)
	if err := iso2.EmbedIgnition([]byte(`{"ignition":{"version":"3.5.0"}}`), true); err != nil {
		t.Fatal(err)
	}
	if got := iso2.Initrd().Paths(); len(got) != 2 {
		t.Errorf("members after embed: %v", got)
	}
}

func TestKargsRoundTrip(t *testing.T) {
	for _, fx := range liveisotest.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			orig := sha(t, fx.Path)
			iso := mustOpen(t, fx.Path, true)
			if !fx.HasKargs() {
				if iso.Kargs != nil {
					t.Fatalf("unexpected kargs %+v", iso.Kargs)
				}
				if err := iso.SetKargs("x"); !errors.Is(err, ErrNoKargs) {
					t.Errorf("SetKargs without areas: %v", err)
				}
				return
			}
			k := iso.Kargs
			if k.Current != k.Default || !strings.Contains(k.Default, "coreos.liveiso="+iso.VolumeID) {
				t.Fatalf("kargs %+v", k)
			}
			mod, err := KargsEdit{Append: []string{"x"}}.Apply(k.Current)
			if err != nil {
				t.Fatal(err)
			}
			if err := iso.SetKargs(mod); err != nil {
				t.Fatal(err)
			}
			if err := iso.Save(); err != nil {
				t.Fatal(err)
			}
			if sha(t, fx.Path) == orig {
				t.Fatal("modify did not change the file")
			}
			iso2 := mustOpen(t, fx.Path, true)
			if iso2.Kargs.Current != k.Default+" x" {
				t.Errorf("kargs after modify: %q", iso2.Kargs.Current)
			}
			// The bytes are what coreos-installer's iso-kargs.sh expects.
			for _, a := range iso2.Kargs.Areas {
				want := []byte(k.Default + " x")
				if fx.S390x() {
					want = append(want, make([]byte, k.Size-len(want))...)
				} else {
					want = append(want, '\n')
					want = append(want, bytes.Repeat([]byte("#"), k.Size-len(want))...)
				}
				if got := readAt(t, fx.Path, a.Offset, int64(k.Size)); !bytes.Equal(got, want) {
					t.Errorf("area at %d: %q", a.Offset, got)
				}
			}
			if err := iso2.SetKargs(iso2.Kargs.Default); err != nil {
				t.Fatal(err)
			}
			if err := iso2.Save(); err != nil {
				t.Fatal(err)
			}
			if sha(t, fx.Path) != orig {
				t.Error("modify + reset did not restore the original sha256")
			}

			// The longest accepted string is size-1 bytes.
			longest := strings.Repeat("k", k.Size-1)
			iso3 := mustOpen(t, fx.Path, true)
			if err := iso3.SetKargs(longest); err != nil {
				t.Errorf("karg string of size-1 bytes refused: %v", err)
			}
			err = iso3.SetKargs(longest + "k")
			if err == nil || !strings.Contains(err.Error(), "kargs too large for area") {
				t.Errorf("karg string of size bytes: %v", err)
			}
			if err := iso3.Save(); err != nil {
				t.Fatal(err)
			}
			if got := mustOpen(t, fx.Path, false).Kargs.Current; got != longest {
				t.Errorf("longest kargs read back as %d bytes", len(got))
			}
		})
	}
}

// An ISO with only the 2021 coreKarg header (kargs.json hidden) gives the
// same areas as kargs.json.
func TestLegacyKargsHeader(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2021-12")
	want := mustOpen(t, fx.Path, false).Kargs
	b, err := os.ReadFile(fx.Path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("KARGS.JSO;1"))
	if i < 0 {
		t.Fatal("no KARGS.JSO record")
	}
	b[i] = 'Z'
	os.WriteFile(fx.Path, b, 0o644)
	got := mustOpen(t, fx.Path, false).Kargs
	if got == nil || !got.Legacy || got.Default != want.Default || got.Size != want.Size || len(got.Areas) != len(want.Areas) {
		t.Fatalf("legacy kargs %+v, want %+v", got, want)
	}
	for i := range got.Areas {
		if got.Areas[i].Offset != want.Areas[i].Offset {
			t.Errorf("area %d at %d, kargs.json says %d", i, got.Areas[i].Offset, want.Areas[i].Offset)
		}
	}
}

func TestKargsEdit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		edit KargsEdit
		want string
	}{
		{"foo bar foobar", KargsEdit{Delete: []string{"foo"}}, "bar foobar"},
		{"foo bar foobar", KargsEdit{Delete: []string{"foobar"}}, "foo bar"},
		{"foo bar foobar", KargsEdit{Delete: []string{"foo bar"}}, "foobar"},
		{"foo=val bar baz=val", KargsEdit{Delete: []string{"   foo=val"}}, "bar baz=val"},
		{"a b", KargsEdit{Append: []string{"c=1", " d "}}, "a b c=1 d"},
		{"a foo=old b", KargsEdit{Replace: []string{"foo=old=new"}}, "a foo=new b"},
		{"a foo=old b", KargsEdit{Delete: []string{"a"}, Append: []string{"a"}}, "foo=old b a"},
	} {
		got, err := tc.edit.Apply(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%+v on %q: %q, %v; want %q", tc.edit, tc.in, got, err, tc.want)
		}
	}
	if _, err := (KargsEdit{Replace: []string{"foo=new"}}).Apply("foo=old"); err == nil || !strings.Contains(err.Error(), "KEY=OLD=NEW") {
		t.Errorf("bad replace: %v", err)
	}
}

func TestVerify(t *testing.T) {
	for _, fx := range liveisotest.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			err := mustOpen(t, fx.Path, false).Verify()
			switch fx.Name {
			case "embed-areas-2023-07.x86_64", "embed-areas-2023-07.s390x":
				if err != nil {
					t.Fatalf("pristine current ISO: %v", err)
				}
				rw := mustOpen(t, fx.Path, true)
				rw.EmbedIgnition([]byte(testConfig), false)
				rw.SetKargs(rw.Kargs.Default + " x")
				if err := rw.Save(); err != nil {
					t.Fatal(err)
				}
				err = mustOpen(t, fx.Path, false).Verify()
				if err == nil || !strings.Contains(err.Error(), "Ignition embed area is not empty: config.ign") || !strings.Contains(err.Error(), "differ from the default") {
					t.Errorf("customized ISO: %v", err)
				}
			case "embed-areas-2020-09":
				if err == nil || !strings.Contains(err.Error(), "COREOS/KARGS.JSO") || !strings.Contains(err.Error(), "no karg embed areas") {
					t.Errorf("2020 ISO: %v", err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), "COREOS/IGNINFO.JSO") || strings.Contains(err.Error(), "KARGS") {
					t.Errorf("pre-2023 ISO: %v", err)
				}
			}
		})
	}
	// Damage the marker after a karg area.
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	iso := mustOpen(t, fx.Path, false)
	a := iso.Kargs.Areas[0]
	f, err := os.OpenFile(fx.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), a.Offset+int64(iso.Kargs.Size)+3)
	f.Close()
	if err := mustOpen(t, fx.Path, false).Verify(); err == nil || !strings.Contains(err.Error(), "karg area in "+a.File+" is not followed by") {
		t.Errorf("damaged marker: %v", err)
	}
}
