package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/okd-project/scos-builder/internal/payload"
	"github.com/urfave/cli/v3"
)

// fakePayload pushes an OS image (a two-arch manifest list), a
// machine-os-images image and a release image whose last layer carries
// release-manifests/, the way oc adm release new lays it out.
type fakePayload struct {
	host, release, osList, machineOSImages string
}

func pushFakePayload(t *testing.T, withRefs bool) *fakePayload {
	t.Helper()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	p := &fakePayload{host: strings.TrimPrefix(srv.URL, "http://")}
	push := func(repoTag string, img v1.Image) string {
		ref, _ := name.ParseReference(p.host+"/"+repoTag, name.Insecure)
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return ref.Context().Name() + "@" + d.String()
	}
	osImage := func(arch string) mutate.IndexAddendum {
		img, _ := random.Image(4096, 1)
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", arch
		cf.Config.Labels = map[string]string{payload.OSStreamLabel: "c10s", "containers.bootc": "1"}
		img, _ = mutate.ConfigFile(img, cf)
		return mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}}
	}
	idx := mutate.AppendManifests(empty.Index, osImage("amd64"), osImage("arm64"))
	ref, _ := name.ParseReference(p.host+"/okd/content:stream-coreos", name.Insecure)
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	p.osList = ref.Context().Name() + "@" + d.String()
	mosi, _ := random.Image(1024, 1)
	p.machineOSImages = push("okd/content:machine-os-images", mosi)

	refs := map[string]any{
		"kind": "ImageStream", "apiVersion": "image.openshift.io/v1",
		"metadata": map[string]any{"name": "4.19.0-okd-scos.1"},
		"spec": map[string]any{"tags": []map[string]any{
			{"name": "cli", "from": map[string]string{"kind": "DockerImage", "name": p.machineOSImages}},
			{"name": "stream-coreos", "from": map[string]string{"kind": "DockerImage", "name": p.osList},
				"annotations": map[string]string{"io.openshift.build.versions": "machine-os=10.0.20250628-0"}},
			{"name": "machine-os-images", "from": map[string]string{"kind": "DockerImage", "name": p.machineOSImages}},
		}},
	}
	refsJSON, _ := json.MarshalIndent(refs, "", "  ")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "release-manifests/", Typeflag: tar.TypeDir, Mode: 0o777})
	files := []struct {
		name string
		data []byte
	}{{"release-manifests/release-metadata", []byte(`{"kind":"cincinnati-metadata-v0","version":"4.19.0-okd-scos.1","previous":[]}`)}}
	if withRefs {
		files = append(files, struct {
			name string
			data []byte
		}{"release-manifests/image-references", refsJSON})
	}
	for _, f := range files {
		tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o444, Size: int64(len(f.data))})
		tw.Write(f.data)
	}
	tw.Close()
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	base, _ := random.Image(4096, 2)
	rel, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	p.release = push("okd/release:4.19.0-okd-scos.1", rel)
	p.release = strings.Split(p.release, "@")[0] + ":4.19.0-okd-scos.1"
	return p
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	// --cache-dir is a global flag: move it before the command.
	global := []string{"scos-builder"}
	var rest []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--cache-dir" && i+1 < len(args) {
			global = append(global, args[i], args[i+1])
			i++
			continue
		}
		rest = append(rest, args[i])
	}
	root := newApp()
	root.Writer, root.ErrWriter = &out, io.Discard
	err := root.Run(context.Background(), append(global, rest...))
	return out.String(), err
}

func TestPayloadInfoJSON(t *testing.T) {
	p := pushFakePayload(t, true)
	out, err := runCLI(t, "payload", "info", "--json", "--tls-verify=false", "--cache-dir", t.TempDir(), "--arch", "aarch64", p.release)
	if err != nil {
		t.Fatal(err)
	}
	var got payload.Resolved
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Version != "4.19.0-okd-scos.1" || got.OSTag != "stream-coreos" || got.OSImage != p.osList ||
		got.MachineOSVersion != "10.0.20250628-0" || got.Recipe != "scos" || !got.RecipeDetected ||
		got.MachineOSImages != p.machineOSImages || !strings.Contains(got.ReleaseDigestRef, "/okd/release@sha256:") {
		t.Errorf("got %s", out)
	}

	out, err = runCLI(t, "payload", "info", "--tls-verify=false", "--cache-dir", t.TempDir(), p.release)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Release:", "4.19.0-okd-scos.1", "OS tag:", "stream-coreos (found by recipe-tag-list)", p.osList, "scos (detected)", "machine-os-images:"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

func TestPayloadInfoErrors(t *testing.T) {
	p := pushFakePayload(t, true)
	cache := t.TempDir()
	_, err := runCLI(t, "payload", "info", "--tls-verify=false", "--cache-dir", cache, "--os-tag", "rhel-coreos", p.release)
	if err == nil || !strings.Contains(err.Error(), `no image tag "rhel-coreos"`) || !strings.Contains(err.Error(), "cli, machine-os-images, stream-coreos") {
		t.Errorf("unknown tag: got %v", err)
	}
	_, err = runCLI(t, "payload", "info", "--tls-verify=false", "--cache-dir", cache, "--arch", "sparc", p.release)
	if err == nil || !strings.Contains(err.Error(), "valid: aarch64") {
		t.Errorf("bad arch: got %v", err)
	}
	_, err = runCLI(t, "payload", "info", "--cache-dir", cache)
	if err == nil || !strings.Contains(err.Error(), "RELEASE-IMAGE") {
		t.Errorf("no argument: got %v", err)
	}
	_, err = runCLI(t, "payload", "info", "--tls-verify=false", "--cache-dir", cache, "--arch", "s390x", p.osList)
	if err == nil || !strings.Contains(err.Error(), "platforms present: linux/amd64, linux/arm64") {
		t.Errorf("manifest list without s390x: got %v", err)
	}
	noRefs := pushFakePayload(t, false)
	_, err = runCLI(t, "payload", "info", "--tls-verify=false", "--cache-dir", cache, noRefs.release)
	if err == nil || !strings.Contains(err.Error(), "no release-manifests/image-references") {
		t.Errorf("payload without image-references: got %v", err)
	}
}

func TestSourceOptionsFromCmd(t *testing.T) {
	var got registryOptions
	cmd := &cli.Command{Name: "x", Flags: append(sourceFlags(), &cli.BoolFlag{Name: "debug"}), Writer: io.Discard, ErrWriter: io.Discard,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			o, err := sourceOptionsFromCmd(cmd)
			got = registryOptions{o.AuthFile, o.TLSVerify, o.CertDir, o.SignaturePolicy, o.RegistriesConf, o.Arch, o.Retries, o.Debugf != nil}
			return err
		}}
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("CONTAINERS_REGISTRIES_CONF", "")
	err := cmd.Run(context.Background(), []string{"x", "--authfile", "/a.json", "--tls-verify=false", "--cert-dir", "/certs",
		"--signature-policy", "/p.json", "--registries-conf", "/r.conf", "--arch", "aarch64", "--retry", "5", "--debug"})
	if err != nil {
		t.Fatal(err)
	}
	want := registryOptions{"/a.json", false, "/certs", "/p.json", "/r.conf", "aarch64", 5, true}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if err := cmd.Run(context.Background(), []string{"x"}); err != nil || !got.tlsVerify || got.retries != 3 || got.debug {
		t.Errorf("defaults: %+v, %v", got, err)
	}
}

type registryOptions struct {
	authFile                              string
	tlsVerify                             bool
	certDir, policy, registriesConf, arch string
	retries                               int
	debug                                 bool
}
