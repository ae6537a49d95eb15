package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

func fixtureStreams(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{"installer-scos.json", "fcos-stream.json"} {
		data, err := os.ReadFile(testutil.SharedFixtures(t, filepath.Join("stream", name)))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = data
	}
	return out
}

func TestRoundTripFixturesLosesNothing(t *testing.T) {
	for name, data := range fixtureStreams(t) {
		t.Run(name, func(t *testing.T) {
			s, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			again, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(again, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(want, got) {
				p, _ := FirstDifference(want, got)
				t.Fatalf("round trip changed the document at %s", p)
			}
			// The parts that are easy to lose must really be there.
			for arch, a := range s.Architectures {
				if a.Images == nil {
					t.Errorf("%s: images lost", arch)
				}
			}
			if err := s.Validate(); err != nil {
				t.Errorf("fixture does not validate: %v", err)
			}
		})
	}
	// The installer's stream is written by Go's json.MarshalIndent from the
	// upstream types: ours must give the very same bytes.
	data := fixtureStreams(t)["installer-scos.json"]
	s, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := s.Marshal(); string(out) != string(data) {
		t.Error("installer-scos.json is not re-encoded byte for byte")
	}
	ext := s.Architectures["x86_64"].RHELCoreOSExtensions
	if ext == nil || ext.AzureDisk == nil || !strings.HasSuffix(ext.AzureDisk.URL, "azure.x86_64.vhd") {
		t.Fatalf("rhel-coreos-extensions.azure-disk not decoded: %+v", ext)
	}
}

func TestParseRefusesUnknownFieldWithPath(t *testing.T) {
	doc := `{"stream":"s","metadata":{"last-modified":"2025-01-01T00:00:00Z"},
	  "architectures":{"x86_64":{"artifacts":{},"images":{"aws":{"regions":{"r":{"release":"1","image":"ami","extra":1}}}}}}}`
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "architectures.x86_64.images.aws.regions.r.extra") {
		t.Fatalf("want error naming the unknown field's path, got %v", err)
	}
	if _, err := Parse([]byte(`{"stream":`)); err == nil {
		t.Fatal("truncated JSON accepted")
	}
}

func TestLiveArtifactNamesMatchInstallerStream(t *testing.T) {
	s, err := Parse(fixtureStreams(t)["installer-scos.json"])
	if err != nil {
		t.Fatal(err)
	}
	for arch, a := range s.Architectures {
		metal := a.Artifacts["metal"]
		names, err := LiveArtifactNames("scos", metal.Release, arch)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{
			names.ISO:       path.Base(metal.Formats["iso"].Disk.Location),
			names.Kernel:    path.Base(metal.Formats["pxe"].Kernel.Location),
			names.Initramfs: path.Base(metal.Formats["pxe"].Initramfs.Location),
			names.Rootfs:    path.Base(metal.Formats["pxe"].Rootfs.Location),
		}
		for want, have := range got {
			if want != have {
				t.Errorf("%s: our name %s, installer stream %s", arch, want, have)
			}
		}
	}
	if FileName("scos") != "scos.json" {
		t.Errorf("FileName = %s", FileName("scos"))
	}
	for _, bad := range [][3]string{{"", "1", "x86_64"}, {"scos", "a/b", "x86_64"}, {"scos", "1", "amd64"}, {"scos", "..", "x86_64"}} {
		if _, err := LiveArtifactNames(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("LiveArtifactNames%v accepted", bad)
		}
	}
}

// writeLiveFiles writes distinct small artifact files and returns their sha256 by name.
func writeLiveFiles(t *testing.T, dir, prefix, release, arch string) (LiveNames, map[string]string) {
	t.Helper()
	names, err := LiveArtifactNames(prefix, release, arch)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for i, n := range []string{names.ISO, names.Kernel, names.Initramfs, names.Rootfs} {
		data := []byte(strings.Repeat(n, i+1))
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		sums[n] = hex.EncodeToString(h[:])
	}
	return names, sums
}

func TestNewLiveStream(t *testing.T) {
	dir := t.TempDir()
	names, sums := writeLiveFiles(t, dir, "scos", "10.0.20260515-0", "aarch64")
	b := LiveBuild{Dir: dir, Prefix: "scos", Release: "10.0.20260515-0", Arch: "aarch64",
		StreamName: "okd-scos-5.0", GeneratorVersion: "v0.1.0", SourceDateEpoch: 1779278400}
	s, err := NewLiveStream(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Metadata.LastModified != "2026-05-20T12:00:00Z" || s.Metadata.Generator != "scos-builder v0.1.0" || s.Stream != "okd-scos-5.0" {
		t.Fatalf("metadata: %+v stream %q", s.Metadata, s.Stream)
	}
	iso, rel, err := s.LiveISO("aarch64")
	if err != nil {
		t.Fatal(err)
	}
	if rel != b.Release || iso.Location != names.ISO || iso.Sha256 != sums[names.ISO] {
		t.Fatalf("iso %+v release %s", iso, rel)
	}
	pxe := s.Architectures["aarch64"].Artifacts["metal"].Formats["pxe"]
	for n, a := range map[string]*Artifact{names.Kernel: pxe.Kernel, names.Initramfs: pxe.Initramfs, names.Rootfs: pxe.Rootfs} {
		if a.Location != n || a.Sha256 != sums[n] {
			t.Errorf("pxe %s: %+v", n, a)
		}
	}
	if _, _, err := s.LiveISO("x86_64"); err == nil || !strings.Contains(err.Error(), `does not have architecture "x86_64" (it has: aarch64)`) {
		t.Errorf("missing arch: %v", err)
	}

	// Same inputs, same bytes.
	s2, err := NewLiveStream(b)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := s.Marshal()
	d2, _ := s2.Marshal()
	if string(d1) != string(d2) {
		t.Fatal("two builds of the same stream differ")
	}
	// It parses back unchanged.
	if back, err := Parse(d1); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("parse back: %v", err)
	}

	b.BaseURL = "https://example.org/okd/x"
	s3, err := NewLiveStream(b)
	if err != nil {
		t.Fatal(err)
	}
	if iso, _, _ := s3.LiveISO("aarch64"); iso.Location != "https://example.org/okd/x/"+names.ISO {
		t.Errorf("base URL location %s", iso.Location)
	}
	b.BaseURL = "not/absolute"
	if _, err := NewLiveStream(b); err == nil {
		t.Error("relative base URL accepted")
	}
	b.BaseURL = ""
	if err := os.Remove(filepath.Join(dir, names.Rootfs)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLiveStream(b); err == nil || !strings.Contains(err.Error(), names.Rootfs) {
		t.Errorf("missing rootfs: %v", err)
	}
}

func liveStream(t *testing.T, arch, release string) *Stream {
	t.Helper()
	dir := t.TempDir()
	writeLiveFiles(t, dir, "scos", release, arch)
	s, err := NewLiveStream(LiveBuild{Dir: dir, Prefix: "scos", Release: release, Arch: arch,
		StreamName: "c10s", GeneratorVersion: "v1", SourceDateEpoch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMergePerArchStreams(t *testing.T) {
	x := liveStream(t, "x86_64", "10.0.1")
	a := liveStream(t, "aarch64", "10.0.1")
	a.Metadata.LastModified = "2026-01-02T00:00:00Z"
	m, err := Merge(Input{"x.json", x}, Input{"a.json", a}, Input{"x-again.json", x})
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(m.Architectures); !reflect.DeepEqual(got, []string{"aarch64", "x86_64"}) {
		t.Fatalf("architectures %v", got)
	}
	if m.Metadata.LastModified != "2026-01-02T00:00:00Z" {
		t.Errorf("last-modified %s, want the newest", m.Metadata.LastModified)
	}
	if !reflect.DeepEqual(m.Architectures["x86_64"], x.Architectures["x86_64"]) {
		t.Error("x86_64 entry changed by merge")
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestMergeSplitFixtureGivesItBack(t *testing.T) {
	for name, data := range fixtureStreams(t) {
		orig, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		var inputs []Input
		for _, arch := range sortedKeys(orig.Architectures) {
			one, _ := Parse(data)
			one.Architectures = map[string]Arch{arch: one.Architectures[arch]}
			inputs = append(inputs, Input{arch, one})
		}
		m, err := Merge(inputs...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(m, orig) {
			t.Errorf("%s: merging the per-arch parts does not give the stream back", name)
		}
	}
}

func TestMergeRefusesConflicts(t *testing.T) {
	x := liveStream(t, "x86_64", "10.0.1")
	otherISO := liveStream(t, "x86_64", "10.0.1")
	iso := otherISO.Architectures["x86_64"].Artifacts["metal"].Formats["iso"]
	iso.Disk.Sha256 = strings.Repeat("0", 64)
	otherRelease := liveStream(t, "x86_64", "10.0.2")
	otherName := liveStream(t, "aarch64", "10.0.1")
	otherName.Stream = "rhel-9"
	withImages := func(s *Stream, image string) *Stream {
		a := s.Architectures["x86_64"]
		a.Images = &Images{KubeVirt: &ContainerImage{Release: "10.0.1", Image: image, DigestRef: image}}
		s.Architectures["x86_64"] = a
		return s
	}
	cases := []struct {
		name  string
		other *Stream
		want  string
	}{
		{"iso sha", otherISO, "conflict at architectures.x86_64.artifacts.metal.formats.iso: a.json and b.json differ"},
		{"release", otherRelease, `architectures.x86_64.artifacts.metal.release: "10.0.1" in a.json, "10.0.2" in b.json`},
		{"stream name", otherName, `stream name "rhel-9" in b.json differs from "c10s" in a.json`},
		{"images", withImages(liveStream(t, "x86_64", "10.0.1"), "q/b"), "conflict at architectures.x86_64.images.kubevirt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := x
			if c.name == "images" {
				base = withImages(liveStream(t, "x86_64", "10.0.1"), "q/a")
			}
			_, err := Merge(Input{"a.json", base}, Input{"b.json", c.other})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want error containing %q, got %v", c.want, err)
			}
		})
	}
	if _, err := Merge(); err == nil {
		t.Error("merge of nothing accepted")
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := liveStream(t, "x86_64", "10.0.1")
	s.Metadata.LastModified = "yesterday"
	metal := s.Architectures["x86_64"].Artifacts["metal"]
	metal.Formats["iso"].Disk.Sha256 = "ABC"
	pxe := metal.Formats["pxe"]
	pxe.Rootfs = nil
	metal.Formats["pxe"] = pxe
	metal.Release = ""
	s.Architectures["x86_64"].Artifacts["metal"] = metal
	s.Architectures["amd64"] = Arch{Artifacts: map[string]PlatformArtifacts{}}
	err := s.Validate()
	if err == nil {
		t.Fatal("invalid stream accepted")
	}
	for _, want := range []string{
		`metadata.last-modified: "yesterday" is not RFC 3339`,
		`architectures.x86_64.artifacts.metal.formats.iso.disk.sha256: "ABC" is not 64 lowercase hex digits`,
		`architectures.x86_64.artifacts.metal.formats.pxe: want kernel, initramfs and rootfs`,
		`architectures.x86_64.artifacts.metal.release: empty`,
		`architectures.amd64: unknown architecture "amd64" (valid: aarch64, ppc64le, riscv64, s390x, x86_64)`,
		`architectures.amd64.artifacts: none`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestGoArch(t *testing.T) {
	for rpm, goarch := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"} {
		if g, err := GoArch(rpm); err != nil || g != goarch {
			t.Errorf("GoArch(%s) = %s, %v", rpm, g, err)
		}
		if r, err := RPMArch(goarch); err != nil || r != rpm {
			t.Errorf("RPMArch(%s) = %s, %v", goarch, r, err)
		}
	}
	if _, err := GoArch("i386"); err == nil {
		t.Error("i386 accepted")
	}
}

func TestReleaseFor(t *testing.T) {
	if r, err := ReleaseFor(map[string]string{LabelVersion: "10.0.20260515-0"}, "9.6.1"); err != nil || r != "10.0.20260515-0" {
		t.Errorf("label first: %q %v", r, err)
	}
	if r, err := ReleaseFor(nil, "9.6.20260327-0"); err != nil || r != "9.6.20260327-0" {
		t.Errorf("machine-os fallback: %q %v", r, err)
	}
	if _, err := ReleaseFor(map[string]string{}, ""); err == nil || !strings.Contains(err.Error(), LabelVersion) {
		t.Errorf("no release: %v", err)
	}
	if _, err := ReleaseFor(map[string]string{LabelVersion: "../x"}, ""); err == nil {
		t.Error("release with a slash accepted")
	}
}
