package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func TestParseReference(t *testing.T) {
	for in, want := range map[string]string{
		"quay.io/okd/scos-release:4.19":          "docker://quay.io/okd/scos-release:4.19",
		"docker://quay.io/okd/scos-release:4.19": "docker://quay.io/okd/scos-release:4.19",
		"localhost:5000/a/b":                     "docker://localhost:5000/a/b:latest",
		"oci:/tmp/layout:tag":                    "oci:/tmp/layout:tag",
		"oci-archive:/tmp/a.tar":                 "oci-archive:/tmp/a.tar:",
		"docker-archive:/tmp/a.tar":              "docker-archive:/tmp/a.tar",
		"dir:/tmp/d":                             "dir:/tmp/d",
	} {
		ref, err := ParseReference(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := refString(ref); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
	ref, err := ParseReference("containers-storage:[vfs@/tmp/x/root+/tmp/x/run]localhost/test:latest")
	if err != nil || ref.Transport().Name() != "containers-storage" {
		t.Errorf("containers-storage: got %v, %v", ref, err)
	}
	for _, bad := range []string{"", "docker://UPPER/x", "quay.io/a/b@sha256:zz"} {
		if _, err := ParseReference(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParsePlatform(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64",
		"ppc64le": "linux/ppc64le", "s390x": "linux/s390x", "linux/amd64": "linux/amd64"} {
		got, err := ParsePlatform(in)
		if err != nil || got != want {
			t.Errorf("%s: got %q %v, want %s", in, got, err, want)
		}
	}
	_, err := ParsePlatform("mips")
	if err == nil || !strings.Contains(err.Error(), "aarch64") {
		t.Errorf("mips: got %v, want an error listing valid names", err)
	}
	if a, _ := RPMArch("arm64"); a != "aarch64" {
		t.Errorf("RPMArch(arm64) = %s", a)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func TestFetchReusesCachedLayers(t *testing.T) {
	reg := newTestRegistry(t)
	img := randomImage(t, 3)
	ref := reg.push(t, "scos/node:1", img)
	cache := t.TempDir()
	ctx := context.Background()

	rec := &recorder{}
	reg.reset()
	got, err := Fetch(ctx, ref, cache, testOptions(), rec)
	if err != nil {
		t.Fatal(err)
	}
	if n := reg.blobs.Load(); n != 4 { // 3 layers + config
		t.Errorf("first fetch: %d blob requests, want 4", n)
	}
	wantLayers, _ := img.Layers()
	cf, _ := img.ConfigFile()
	if len(got.Layers) != 3 {
		t.Fatalf("got %d layers", len(got.Layers))
	}
	for i, l := range got.Layers {
		d, _ := wantLayers[i].Digest()
		if l.Digest.String() != d.String() || l.DiffID.String() != cf.RootFS.DiffIDs[i].String() {
			t.Errorf("layer %d: got %s/%s, want %s/%s", i, l.Digest, l.DiffID, d, cf.RootFS.DiffIDs[i])
		}
		if sum := sha256File(t, l.Path); sum != d.String() {
			t.Errorf("layer %d: cached file hashes to %s", i, sum)
		}
	}
	wantDigest, _ := img.Digest()
	if got.Digest.String() != wantDigest.String() || got.DigestRef != reg.host+"/scos/node@"+wantDigest.String() {
		t.Errorf("digest %s / %s, want %s", got.Digest, got.DigestRef, wantDigest)
	}
	if rec.progress == 0 {
		t.Error("no progress reported")
	}
	// The cache is a valid OCI layout that another reader (ggcr) accepts.
	lp, err := layout.FromPath(cache)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lp.Image(v1.Hash{Algorithm: "sha256", Hex: got.ManifestDigest.Encoded()}); err != nil {
		t.Errorf("reading cache layout with ggcr: %v", err)
	}

	// Second run by tag: only the manifest is read, no blob.
	reg.reset()
	rec = &recorder{}
	again, err := Fetch(ctx, ref, cache, testOptions(), rec)
	if err != nil {
		t.Fatal(err)
	}
	if n := reg.blobs.Load(); n != 0 {
		t.Errorf("second fetch by tag: %d blob requests, want 0 (%v)", n, reg.paths)
	}
	skipped := 0
	for _, m := range rec.messages {
		if strings.Contains(m, "skipped: already exists") {
			skipped++
		}
	}
	if skipped != 3 {
		t.Errorf("second fetch reported %d reused layers, want 3: %v", skipped, rec.messages)
	}
	if again.Layers[2].Path != got.Layers[2].Path {
		t.Errorf("second fetch returned other paths")
	}
	// By digest: no request at all.
	reg.reset()
	if _, err := Fetch(ctx, got.DigestRef, cache, testOptions(), nil); err != nil {
		t.Fatal(err)
	}
	reg.reset()
	if _, err := Fetch(ctx, got.DigestRef, cache, testOptions(), nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.all.Load(); n != 0 {
		t.Errorf("fetch by digest from cache: %d requests, want 0 (%v)", n, reg.paths)
	}
}

func platformImage(t *testing.T, arch string) mutate.IndexAddendum {
	img := randomImage(t, 1)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}}
}

func TestFetchSelectsArchFromManifestList(t *testing.T) {
	reg := newTestRegistry(t)
	amd, arm := platformImage(t, "amd64"), platformImage(t, "arm64")
	idx := mutate.AppendManifests(empty.Index, amd, arm)
	ref := reg.pushIndex(t, "scos/multi:1", idx)
	ctx := context.Background()

	opts := testOptions()
	opts.Arch = "aarch64"
	got, err := Fetch(ctx, ref, t.TempDir(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	armDigest, _ := arm.Add.(v1.Image).Digest()
	idxDigest, _ := idx.Digest()
	if got.InstanceDigest.String() != armDigest.String() || got.Digest.String() != idxDigest.String() || got.Platform != "linux/arm64" {
		t.Errorf("got instance %s of %s (%s), want %s of %s", got.InstanceDigest, got.Digest, got.Platform, armDigest, idxDigest)
	}
	if got.Config.Architecture != "arm64" {
		t.Errorf("config architecture %s", got.Config.Architecture)
	}

	opts.Arch = "s390x"
	_, err = Fetch(ctx, ref, t.TempDir(), opts, nil)
	if err == nil || !strings.Contains(err.Error(), "linux/s390x") || !strings.Contains(err.Error(), "linux/amd64, linux/arm64") {
		t.Errorf("missing arch: got %v, want an error naming linux/s390x and listing linux/amd64, linux/arm64", err)
	}
	t.Logf("missing arch: %v", err)
}

func TestFetchRefusesCorruptBlobInOCILayout(t *testing.T) {
	dir := t.TempDir()
	img := randomImage(t, 2)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "bad"})); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	d, _ := layers[1].Digest()
	blob := filepath.Join(dir, "blobs", "sha256", d.Hex)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.Chmod(blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	_, err = Fetch(context.Background(), "oci:"+dir+":bad", cache, testOptions(), nil)
	if err == nil || !strings.Contains(err.Error(), d.String()) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("got %v, want a digest mismatch naming %s", err, d)
	}
	t.Logf("corrupt blob: %v", err)
	if _, err := os.Stat(filepath.Join(cache, "blobs", "sha256", d.Hex)); err == nil {
		t.Error("corrupt blob was stored in the cache")
	}
	// The intact layer of the same layout still reads fine.
	d0, _ := layers[0].Digest()
	c, err := New(testOptions(), cache)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, _, err := c.OpenLayer(context.Background(), "oci:"+dir+":bad", 0)
	if err != nil {
		t.Fatalf("reading intact layer %s: %v", d0, err)
	}
	rc.Close()
}

func TestFetchUnreachableRegistryNamesHost(t *testing.T) {
	_, err := Fetch(context.Background(), "127.0.0.1:1/scos/node:1", t.TempDir(), testOptions(), nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("got %v, want an error naming 127.0.0.1:1", err)
	}
	t.Logf("unreachable: %v", err)
}

func TestFetchUnknownTag(t *testing.T) {
	reg := newTestRegistry(t)
	reg.push(t, "scos/node:1", randomImage(t, 1))
	_, err := Fetch(context.Background(), reg.host+"/scos/node:nope", t.TempDir(), testOptions(), nil)
	if err == nil || !strings.Contains(err.Error(), "scos/node:nope") {
		t.Fatalf("got %v, want an error naming the reference", err)
	}
	t.Logf("unknown tag: %v", err)
}

func TestSignaturePolicy(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "scos/node:1", randomImage(t, 1))
	dir := t.TempDir()
	reject := filepath.Join(dir, "reject.json")
	os.WriteFile(reject, []byte(`{"default":[{"type":"reject"}]}`), 0o644)
	accept := filepath.Join(dir, "accept.json")
	os.WriteFile(accept, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644)

	opts := testOptions()
	opts.SignaturePolicy = reject
	_, err := Fetch(context.Background(), ref, t.TempDir(), opts, nil)
	if err == nil || !strings.Contains(err.Error(), "rejected") || !strings.Contains(err.Error(), reject) {
		t.Errorf("reject policy: got %v", err)
	}
	t.Logf("reject policy: %v", err)
	opts.SignaturePolicy = accept
	if _, err := Fetch(context.Background(), ref, t.TempDir(), opts, nil); err != nil {
		t.Errorf("accept policy: %v", err)
	}
	opts.SignaturePolicy = filepath.Join(dir, "missing.json")
	if _, err := New(opts, t.TempDir()); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing policy: got %v", err)
	}
}

func TestRegistriesConfMirror(t *testing.T) {
	reg := newTestRegistry(t)
	reg.push(t, "mirrored/node:1", randomImage(t, 1))
	conf := filepath.Join(t.TempDir(), "registries.conf")
	os.WriteFile(conf, []byte(`[[registry]]
location = "registry.invalid/mirrored"
[[registry.mirror]]
location = "`+reg.host+`/mirrored"
insecure = true
`), 0o644)
	opts := testOptions()
	opts.TLSVerify = true
	opts.RegistriesConf = conf
	reg.reset()
	got, err := Fetch(context.Background(), "registry.invalid/mirrored/node:1", t.TempDir(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reg.blobs.Load() == 0 || len(got.Layers) != 1 {
		t.Errorf("mirror not used: %d blob requests", reg.blobs.Load())
	}
}

func TestFetchRetriesTransientErrors(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "scos/node:1", randomImage(t, 1))
	reg.reset()
	reg.failBlobs.Store(1)
	opts := testOptions()
	opts.Retries = 2
	if _, err := Fetch(context.Background(), ref, t.TempDir(), opts, nil); err != nil {
		t.Fatalf("a 503 should be retried: %v", err)
	}
	reg.reset()
	reg.failBlobs.Store(5)
	opts.Retries = 0
	_, err := Fetch(context.Background(), ref, t.TempDir(), opts, nil)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("without retries: got %v, want the 503", err)
	}
}

func TestFetchLayersInParallel(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "scos/node:1", randomImage(t, 4))
	reg.reset()
	reg.blobDelay = 100 * time.Millisecond
	rec := &recorder{}
	if _, err := Fetch(context.Background(), ref, t.TempDir(), testOptions(), rec); err != nil {
		t.Fatal(err)
	}
	if n := reg.maxInFlight.Load(); n < 2 {
		t.Errorf("at most %d blob transfers at once, want parallel transfers", n)
	}
}

func TestLayerOpenVerifiesDiffID(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "scos/node:1", randomImage(t, 2))
	got, err := Fetch(context.Background(), ref, t.TempDir(), testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range got.Layers {
		rc, err := l.Open()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, rc); err != nil {
			t.Errorf("layer %s: %v", l.Digest, err)
		}
		rc.Close()
		if "sha256:"+hex.EncodeToString(h.Sum(nil)) != l.DiffID.String() {
			t.Errorf("layer %s: uncompressed content is not its diff ID", l.Digest)
		}
	}
	bad := got.Layers[0]
	bad.DiffID = got.Layers[1].DiffID
	rc, err := bad.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err == nil || !strings.Contains(err.Error(), "does not match diff ID") {
		t.Errorf("wrong diff ID: got %v", err)
	}
}

func TestDefaultPolicyWhenNoneExists(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	reg := newTestRegistry(t)
	ref := reg.push(t, "scos/node:1", randomImage(t, 1))
	var debug []string
	opts := testOptions()
	opts.Debugf = func(format string, args ...any) { debug = append(debug, fmt.Sprintf(format, args...)) }
	opts.systemRoot = t.TempDir()
	c, err := New(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fetch(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	if len(debug) == 0 || !strings.Contains(debug[0], "accepting any image") {
		t.Errorf("debug messages %q, want one saying any image is accepted", debug)
	}
}
