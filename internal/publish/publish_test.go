package publish

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/okd-project/scos-builder/internal/registry"
	"github.com/okd-project/scos-builder/internal/stream"
	"github.com/okd-project/scos-builder/internal/testutil"
)

const testRelease = "10.0.20260515-0"

// makeBuild writes a build output directory for arch: fake artifacts with
// distinct pseudo-random bytes and scos.json describing them.
func makeBuild(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	names, err := stream.LiveArtifactNames("scos", testRelease, arch)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(len(arch)), 7))
	for i, n := range []string{names.ISO, names.Kernel, names.Initramfs, names.Rootfs} {
		data := make([]byte, 64*1024*(i+1)+len(arch))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if i == 0 {
			copy(data[32768:], "CD001"+arch) // look a little like an ISO
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := stream.NewLiveStream(stream.LiveBuild{Dir: dir, Prefix: "scos", Release: testRelease, Arch: arch,
		StreamName: "c10s", GeneratorVersion: "test", SourceDateEpoch: 1779278400})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(filepath.Join(dir, stream.FileName("scos"))); err != nil {
		t.Fatal(err)
	}
	return dir
}

func isoOf(t *testing.T, dir, arch string) []byte {
	t.Helper()
	names, _ := stream.LiveArtifactNames("scos", testRelease, arch)
	data, err := os.ReadFile(filepath.Join(dir, names.ISO))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// isolatedAuth keeps the tests from reading the invoking user's registry
// credentials.
func isolatedAuth(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_RUNTIME_DIR", home)
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("DOCKER_CONFIG", home)
}

// extractLikeOC does what `oc image extract --filter-by-os=linux/<goarch>`
// does, with skopeo and tar as independent tools: select the platform's
// image from the list, fetch it, and unpack its layers in order.
func extractLikeOC(t *testing.T, ref, goarch string, extraSkopeo ...string) (root string, config ocispec.Image, layers int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "img")
	args := append([]string{"--override-os", "linux", "--override-arch", goarch}, extraSkopeo...)
	args = append(args, "copy", "--src-tls-verify=false", "docker://"+ref, "dir:"+dir)
	testutil.Run(t, "skopeo", args...)
	var m ocispec.Manifest
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	cfgData, err := os.ReadFile(filepath.Join(dir, m.Config.Digest.Encoded()))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cfgData, &config); err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		testutil.Run(t, "tar", "-xzf", filepath.Join(dir, l.Digest.Encoded()), "-C", root)
	}
	return root, config, len(m.Layers)
}

// checkCoreOS checks /coreos of an extracted machine-os-images image the
// way the agent installer uses it.
func checkCoreOS(t *testing.T, root, arch string, wantISO []byte, wantArchs []string) {
	t.Helper()
	iso, err := os.ReadFile(filepath.Join(root, "coreos", "coreos-"+arch+".iso"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256Hex(iso)
	shaFile, err := os.ReadFile(filepath.Join(root, "coreos", "coreos-"+arch+".iso.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	// The installer hex-decodes the whole file: no newline allowed.
	if decoded, err := hex.DecodeString(string(shaFile)); err != nil || hex.EncodeToString(decoded) != sum {
		t.Errorf("%s: .sha256 file %q does not hex-decode to the ISO's sha256 %s (%v)", arch, shaFile, sum, err)
	}
	if !bytes.Equal(iso, wantISO) {
		t.Errorf("%s: extracted ISO differs from the built one", arch)
	}
	var s struct {
		Architectures map[string]struct {
			Artifacts map[string]struct {
				Release string `json:"release"`
				Formats map[string]struct {
					Disk struct {
						Sha256 string `json:"sha256"`
					} `json:"disk"`
				} `json:"formats"`
			} `json:"artifacts"`
		} `json:"architectures"`
	}
	data, err := os.ReadFile(filepath.Join(root, "coreos", "coreos-stream.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	metal := s.Architectures[arch].Artifacts["metal"]
	if metal.Formats["iso"].Disk.Sha256 != sum {
		t.Errorf("%s: stream iso sha256 %s, ISO %s", arch, metal.Formats["iso"].Disk.Sha256, sum)
	}
	if metal.Release != testRelease {
		t.Errorf("%s: stream metal.release %q, want %q", arch, metal.Release, testRelease)
	}
	for _, a := range wantArchs {
		if _, ok := s.Architectures[a]; !ok {
			t.Errorf("coreos-stream.json lacks %s", a)
		}
	}
}

func TestPublishMachineOSImagesExtractedWithSkopeo(t *testing.T) {
	testutil.RequireTool(t, "skopeo", "tar")
	isolatedAuth(t)
	reg := testutil.StartDockerRegistry(t, testutil.RegistryOptions{})
	x86, arm := makeBuild(t, "x86_64"), makeBuild(t, "aarch64")
	ref := reg.Addr + "/okd/machine-os-images:test"
	res, err := Publish(context.Background(), []string{x86, arm}, Options{
		LayoutOptions: LayoutOptions{Format: FormatMachineOSImages, Registry: RegistryOptions{Source: registry.Options{TLSVerify: false}}},
		To:            ref,
	})
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte(testutil.Run(t, "skopeo", "inspect", "--raw", "--tls-verify=false", "docker://"+ref))
	if got := "sha256:" + sha256Hex(raw); got != res.Digest.String() {
		t.Errorf("registry index %s, Publish reported %s", got, res.Digest)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range idx.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	// The default is a Docker manifest list: every oc version reads it.
	if idx.MediaType != "application/vnd.docker.distribution.manifest.list.v2+json" || strings.Join(platforms, " ") != "linux/arm64 linux/amd64" {
		t.Fatalf("index %s with platforms %v", idx.MediaType, platforms)
	}
	for _, m := range idx.Manifests {
		if m.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
			t.Errorf("manifest media type %s", m.MediaType)
		}
	}
	for arch, goarch := range map[string]string{"x86_64": "amd64", "aarch64": "arm64"} {
		root, cfg, _ := extractLikeOC(t, ref, goarch)
		src := x86
		if arch == "aarch64" {
			src = arm
		}
		checkCoreOS(t, root, arch, isoOf(t, src, arch), []string{"x86_64", "aarch64"})
		if cfg.Architecture != goarch || cfg.OS != "linux" || cfg.Config.Labels[LabelReleaseOperator] != "true" {
			t.Errorf("%s: config platform %s/%s labels %v", arch, cfg.OS, cfg.Architecture, cfg.Config.Labels)
		}
		// only this arch's ISO is in its image
		entries, _ := os.ReadDir(filepath.Join(root, "coreos"))
		if len(entries) != 3 {
			t.Errorf("%s: /coreos has %d entries, want 3", arch, len(entries))
		}
	}
}

func TestPublishOCIArtifactIndexFoundByArtifactType(t *testing.T) {
	testutil.RequireTool(t, "skopeo")
	isolatedAuth(t)
	reg := testutil.StartDockerRegistry(t, testutil.RegistryOptions{})
	x86, arm := makeBuild(t, "x86_64"), makeBuild(t, "aarch64")
	ref := reg.Addr + "/okd/scos-iso:test"
	res, err := Publish(context.Background(), []string{arm, x86}, Options{
		LayoutOptions: LayoutOptions{Format: FormatOCIArtifact, Registry: RegistryOptions{Source: registry.Options{TLSVerify: false}}},
		To:            ref,
	})
	if err != nil {
		t.Fatal(err)
	}
	// As coreos-assembler's import does: read the index raw, keep entries
	// whose artifactType starts with application/vnd.diskimage., fetch layers[0].
	raw := []byte(testutil.Run(t, "skopeo", "inspect", "--raw", "--tls-verify=false", "docker://"+ref))
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.MediaType != ocispec.MediaTypeImageIndex || "sha256:"+sha256Hex(raw) != res.Digest.String() {
		t.Fatalf("index media type %s digest %s (published %s)", idx.MediaType, sha256Hex(raw), res.Digest)
	}
	want := map[string][]byte{"amd64": isoOf(t, x86, "x86_64"), "arm64": isoOf(t, arm, "aarch64")}
	found := map[string]bool{}
	var streamSeen bool
	for _, d := range idx.Manifests {
		mdata := registryGet(t, reg, "/v2/okd/scos-iso/manifests/"+d.Digest.String(), ocispec.MediaTypeImageManifest)
		var m ocispec.Manifest
		if err := json.Unmarshal(mdata, &m); err != nil {
			t.Fatal(err)
		}
		if m.ArtifactType != d.ArtifactType || len(m.Layers) != 1 {
			t.Fatalf("manifest %s: artifactType %q (index says %q), %d layers", d.Digest, m.ArtifactType, d.ArtifactType, len(m.Layers))
		}
		blob := registryGet(t, reg, "/v2/okd/scos-iso/blobs/"+m.Layers[0].Digest.String(), "")
		if "sha256:"+sha256Hex(blob) != m.Layers[0].Digest.String() {
			t.Fatalf("blob %s has another digest", m.Layers[0].Digest)
		}
		if d.ArtifactType == ArtifactTypeStream {
			s, err := stream.Parse(blob)
			if err != nil || len(s.Architectures) != 2 || m.Layers[0].Annotations[ocispec.AnnotationTitle] != "scos.json" {
				t.Fatalf("stream artifact: %v %+v", err, m.Layers[0].Annotations)
			}
			streamSeen = true
			continue
		}
		if !strings.HasPrefix(d.ArtifactType, ArtifactTypePrefix) {
			continue
		}
		iso, ok := want[d.Platform.Architecture]
		if !ok || d.Platform.OS != "linux" {
			t.Fatalf("unexpected platform %+v", d.Platform)
		}
		if !bytes.Equal(blob, iso) || m.Layers[0].Digest.Encoded() != sha256Hex(iso) {
			t.Errorf("%s: blob is not the ISO", d.Platform.Architecture)
		}
		rpm, _ := stream.RPMArch(d.Platform.Architecture)
		if title := m.Layers[0].Annotations[ocispec.AnnotationTitle]; title != "scos-"+testRelease+"-live-iso."+rpm+".iso" {
			t.Errorf("title %q", title)
		}
		found[d.Platform.Architecture] = true
	}
	if len(found) != 2 || !streamSeen {
		t.Fatalf("found ISO artifacts %v, stream %v", found, streamSeen)
	}
}

func TestPublishToUnauthorizedRegistry(t *testing.T) {
	isolatedAuth(t)
	reg := testutil.StartDockerRegistry(t, testutil.RegistryOptions{User: "builder", Password: "s3cret-pass"})
	dir := makeBuild(t, "x86_64")
	ref := reg.Addr + "/okd/machine-os-images:auth"
	opts := func(authFile string) Options {
		return Options{LayoutOptions: LayoutOptions{Format: FormatMachineOSImages,
			Registry: RegistryOptions{Source: registry.Options{AuthFile: authFile, TLSVerify: false}}}, To: ref}
	}
	_, err := Publish(context.Background(), []string{dir}, opts(""))
	if err == nil || !strings.Contains(err.Error(), "pushing "+ref) || !strings.Contains(err.Error(), "--authfile") {
		t.Fatalf("push without credentials: want a clear authentication error, got %v", err)
	}
	t.Logf("no credentials: %v", err)
	_, err = Publish(context.Background(), []string{dir}, opts(reg.AuthFile(t, reg.User, "wrong")))
	if err == nil || !strings.Contains(err.Error(), "--authfile") {
		t.Fatalf("push with a wrong password: got %v", err)
	}
	t.Logf("wrong password: %v", err)
	if _, err := Publish(context.Background(), []string{dir}, opts(reg.AuthFile(t, reg.User, reg.Password))); err != nil {
		t.Fatalf("push with the right credentials: %v", err)
	}
}

// writeBaseImage pushes a two-platform base image with one layer holding
// etc/base-release and a label.
func writeBaseImage(t *testing.T, reg *testutil.DockerRegistry, ref string) {
	t.Helper()
	dir := t.TempDir()
	l, err := openLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	for _, goarch := range []string{"amd64", "arm64"} {
		var tarBuf, gzBuf bytes.Buffer
		tw := tar.NewWriter(&tarBuf)
		body := "base for " + goarch + "\n"
		_ = tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: "etc/base-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		_, _ = tw.Write([]byte(body))
		_ = tw.Close()
		gz := gzip.NewWriter(&gzBuf)
		_, _ = gz.Write(tarBuf.Bytes())
		_ = gz.Close()
		layer, err := l.putBytes(ocispec.MediaTypeImageLayerGzip, gzBuf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		created := time.Unix(0, 0).UTC()
		cfg := ocispec.Image{Created: &created, Platform: ocispec.Platform{OS: "linux", Architecture: goarch},
			Config: ocispec.ImageConfig{Labels: map[string]string{"base": goarch}, Env: []string{"PATH=/usr/bin"}},
			RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digestT{digestOf(tarBuf.Bytes())}}}
		cfgDesc, _ := l.putJSON(ocispec.MediaTypeImageConfig, cfg)
		mdesc, _ := l.putJSON(ocispec.MediaTypeImageManifest, ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageManifest, Config: cfgDesc, Layers: []ocispec.Descriptor{layer}})
		mdesc.Platform = &ocispec.Platform{OS: "linux", Architecture: goarch}
		idx.Manifests = append(idx.Manifests, mdesc)
	}
	top, _ := l.putJSON(ocispec.MediaTypeImageIndex, idx)
	if err := l.tag("base", top); err != nil {
		t.Fatal(err)
	}
	if _, err := Push(context.Background(), dir, "base", ref, RegistryOptions{Source: registry.Options{TLSVerify: false}}); err != nil {
		t.Fatal(err)
	}
}

func TestPublishMachineOSImagesOnBaseImage(t *testing.T) {
	testutil.RequireTool(t, "skopeo", "tar")
	isolatedAuth(t)
	reg := testutil.StartDockerRegistry(t, testutil.RegistryOptions{})
	base := reg.Addr + "/base/rhel:9"
	writeBaseImage(t, reg, base)
	x86, arm := makeBuild(t, "x86_64"), makeBuild(t, "aarch64")
	wantIndex := map[string]string{ManifestOCI: ocispec.MediaTypeImageIndex, ManifestV2S2: "application/vnd.docker.distribution.manifest.list.v2+json"}
	for _, format := range ManifestFormats() {
		t.Run(format, func(t *testing.T) {
			ref := reg.Addr + "/okd/machine-os-images:on-base-" + format
			if _, err := Publish(context.Background(), []string{x86, arm}, Options{
				LayoutOptions: LayoutOptions{Format: FormatMachineOSImages, ManifestFormat: format, BaseImage: base, Registry: RegistryOptions{Source: registry.Options{TLSVerify: false}}},
				To:            ref,
			}); err != nil {
				t.Fatal(err)
			}
			raw := []byte(testutil.Run(t, "skopeo", "inspect", "--raw", "--tls-verify=false", "docker://"+ref))
			var idx ocispec.Index
			if err := json.Unmarshal(raw, &idx); err != nil || idx.MediaType != wantIndex[format] {
				t.Fatalf("want %s, got %s (%v)", wantIndex[format], idx.MediaType, err)
			}
			root, cfg, layers := extractLikeOC(t, ref, "arm64")
			checkCoreOS(t, root, "aarch64", isoOf(t, arm, "aarch64"), nil)
			release, err := os.ReadFile(filepath.Join(root, "etc", "base-release"))
			if err != nil || string(release) != "base for arm64\n" {
				t.Fatalf("base layer content %q, %v", release, err)
			}
			if layers != 2 || len(cfg.RootFS.DiffIDs) != 2 || cfg.Config.Labels["base"] != "arm64" ||
				cfg.Config.Labels[LabelReleaseOperator] != "true" || len(cfg.Config.Env) != 1 {
				t.Fatalf("layers %d, config %+v", layers, cfg)
			}
		})
	}
}

func TestWriteLayoutIsDeterministic(t *testing.T) {
	x86, arm := makeBuild(t, "x86_64"), makeBuild(t, "aarch64")
	for _, o := range []LayoutOptions{{Format: FormatMachineOSImages}, {Format: FormatMachineOSImages, ManifestFormat: ManifestOCI}, {Format: FormatOCIArtifact}} {
		var digests []string
		for _, order := range [][]string{{x86, arm}, {arm, x86}} {
			builds, err := LoadBuilds(order)
			if err != nil {
				t.Fatal(err)
			}
			desc, err := WriteLayout(context.Background(), builds, t.TempDir(), "t", o)
			if err != nil {
				t.Fatal(err)
			}
			digests = append(digests, desc.Digest.String())
		}
		if digests[0] != digests[1] {
			t.Errorf("%+v: two writes gave %v", o, digests)
		}
	}
	// A kept layout must not share the ISO's inode: coreos-installer edits
	// ISOs in place.
	builds, _ := LoadBuilds([]string{x86})
	kept := t.TempDir()
	if _, err := WriteLayout(context.Background(), builds, kept, "t", LayoutOptions{Format: FormatOCIArtifact}); err != nil {
		t.Fatal(err)
	}
	isoInfo, _ := os.Stat(builds[0].ISOFile)
	blobInfo, err := os.Stat(filepath.Join(kept, "blobs", "sha256", builds[0].ISO.Sha256))
	if err != nil || os.SameFile(isoInfo, blobInfo) {
		t.Errorf("kept layout blob: %v, same file as the ISO: %v", err, err == nil && os.SameFile(isoInfo, blobInfo))
	}
	if _, err := WriteLayout(context.Background(), builds, t.TempDir(), "t", LayoutOptions{Format: "iso"}); err == nil ||
		!strings.Contains(err.Error(), `unknown publish format "iso" (valid: machine-os-images, oci-artifact)`) {
		t.Errorf("unknown format: %v", err)
	}
}

func TestLoadBuildRefusesBadInput(t *testing.T) {
	names, _ := stream.LiveArtifactNames("scos", testRelease, "x86_64")
	cases := []struct {
		name  string
		setup func(t *testing.T) []string
		want  string
	}{
		{"no stream", func(t *testing.T) []string { return []string{t.TempDir()} }, "no stream file"},
		{"missing dir", func(t *testing.T) []string { return []string{filepath.Join(t.TempDir(), "nope")} }, "no such file"},
		{"iso changed", func(t *testing.T) []string {
			d := makeBuild(t, "x86_64")
			if err := os.WriteFile(filepath.Join(d, names.ISO), []byte("other"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{d}
		}, "but the stream says"},
		{"iso missing", func(t *testing.T) []string {
			d := makeBuild(t, "x86_64")
			os.Remove(filepath.Join(d, names.ISO))
			return []string{d}
		}, names.ISO},
		{"two arches in one stream", func(t *testing.T) []string {
			d := makeBuild(t, "x86_64")
			a, _ := stream.ReadFile(filepath.Join(makeBuild(t, "aarch64"), "scos.json"))
			x, _ := stream.ReadFile(filepath.Join(d, "scos.json"))
			m, err := stream.Merge(stream.Input{Stream: x}, stream.Input{Stream: a})
			if err != nil {
				t.Fatal(err)
			}
			_ = m.WriteFile(filepath.Join(d, "scos.json"))
			return []string{d}
		}, "describes 2 architectures (aarch64, x86_64)"},
		{"stream without metal iso", func(t *testing.T) []string {
			d := makeBuild(t, "x86_64")
			s, _ := stream.ReadFile(filepath.Join(d, "scos.json"))
			delete(s.Architectures["x86_64"].Artifacts["metal"].Formats, "iso")
			_ = s.WriteFile(filepath.Join(d, "scos.json"))
			return []string{d}
		}, "no metal iso disk"},
		{"stream without any architecture", func(t *testing.T) []string {
			d := makeBuild(t, "x86_64")
			s, _ := stream.ReadFile(filepath.Join(d, "scos.json"))
			s.Architectures = map[string]stream.Arch{}
			_ = s.WriteFile(filepath.Join(d, "scos.json"))
			return []string{d}
		}, "architectures: none"},
		{"same arch twice", func(t *testing.T) []string {
			return []string{makeBuild(t, "x86_64"), makeBuild(t, "x86_64")}
		}, "are both for x86_64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadBuilds(c.setup(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want error containing %q, got %v", c.want, err)
			}
		})
	}
}

type digestT = digest.Digest

func digestOf(b []byte) digest.Digest { return digest.FromBytes(b) }
