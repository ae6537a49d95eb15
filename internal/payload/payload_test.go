package payload

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// tag is a test ImageStream tag.
type tag struct {
	name, pull, versions, source string
}

func imageReferences(name string, tags ...tag) []byte {
	type from struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	type t struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations,omitempty"`
		From        from              `json:"from"`
	}
	var ts []t
	for _, tg := range tags {
		a := map[string]string{}
		if tg.versions != "" {
			a["io.openshift.build.versions"] = tg.versions
		}
		if tg.source != "" {
			a["io.openshift.build.source-location"] = tg.source
		}
		ts = append(ts, t{Name: tg.name, Annotations: a, From: from{"DockerImage", tg.pull}})
	}
	doc := map[string]any{
		"kind": "ImageStream", "apiVersion": "image.openshift.io/v1",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"lookupPolicy": map[string]bool{"local": false}, "tags": ts},
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return b
}

// releaseLayer builds the tar oc writes: release-manifests/ and its files.
func releaseLayer(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "release-manifests/", Typeflag: tar.TypeDir, Mode: 0o777})
	for _, name := range []string{"image-references", "release-metadata", "0000_80_machine-config_05_osimageurl.yaml", "0000_50_installer_coreos-bootimages.yaml"} {
		data, ok := files[name]
		if !ok {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: "release-manifests/" + name, Typeflag: tar.TypeReg, Mode: 0o444, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	return buf.Bytes()
}

func osImageURLConfigMap(def string, streams map[string]string) []byte {
	s := map[string]any{"default": def, "streams": map[string]any{}}
	for name, pull := range streams {
		s["streams"].(map[string]any)[name] = map[string]string{"baseOSContainerImage": pull, "baseOSExtensionsContainerImage": pull + "-ext"}
	}
	sj, _ := json.Marshal(s)
	sjq, _ := json.Marshal(string(sj))
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: machine-config-osimageurl
  namespace: openshift-machine-config-operator
data:
  releaseVersion: 4.19.0
  baseOSContainerImage: "%s"
  streams.json: %s
`, streams[def], sjq))
}

// fakeSource serves a release layer and image labels from memory.
type fakeSource struct {
	release []byte
	labels  map[string]map[string]string
	digests map[string]string
	asked   []string
}

func (f *fakeSource) LastLayer(ctx context.Context, ref string) (io.ReadCloser, string, error) {
	if f.release == nil {
		return nil, "", fmt.Errorf("manifest unknown")
	}
	return io.NopCloser(bytes.NewReader(f.release)), "quay.io/okd/release@" + digestA, nil
}

func (f *fakeSource) Labels(ctx context.Context, ref string) (map[string]string, string, error) {
	f.asked = append(f.asked, ref)
	l, ok := f.labels[ref]
	if !ok {
		return nil, "", fmt.Errorf("%s: manifest unknown", ref)
	}
	return l, f.digests[ref], nil
}

func pull(n int) string { return fmt.Sprintf("quay.io/okd/content@sha256:%064x", n) }

func TestParseImageReferencesFixture(t *testing.T) {
	data, err := os.ReadFile(testutil.SharedFixtures(t, "payload/mco-image-references.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	is, err := ParseImageReferences(data)
	if err != nil {
		t.Fatal(err)
	}
	tg, ok := is.Tag("rhel-coreos")
	if !ok || !strings.HasSuffix(tg.PullSpec(), "placeholdernamespace:rhel-coreos") {
		t.Errorf("rhel-coreos tag: %+v", tg)
	}
	names := is.TagNames()
	if len(names) != 11 || names[0] != "baremetal-runtimecfg" {
		t.Errorf("tags: %v", names)
	}
}

func TestReadRelease(t *testing.T) {
	layer := releaseLayer(t, map[string][]byte{
		"image-references": imageReferences("4.19.0-okd-scos.1",
			tag{name: "stream-coreos", pull: pull(1), versions: "machine-os=10.0.20250628-0"},
			tag{name: "machine-os-images", pull: pull(2)}),
		"release-metadata":                          []byte(`{"kind":"cincinnati-metadata-v0","version":"4.19.0-okd-scos.1","previous":["4.18.0"]}`),
		"0000_80_machine-config_05_osimageurl.yaml": osImageURLConfigMap("stream-coreos", map[string]string{"stream-coreos": pull(1)}),
		"0000_50_installer_coreos-bootimages.yaml":  []byte("kind: ConfigMap\n"),
	})
	rel, err := ReadRelease(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version() != "4.19.0-okd-scos.1" || rel.Metadata.Previous[0] != "4.18.0" {
		t.Errorf("metadata: %+v", rel.Metadata)
	}
	if rel.OSImageURL == nil || rel.OSImageURL.Streams.Default != "stream-coreos" ||
		rel.OSImageURL.Streams.Streams["stream-coreos"].BaseOSContainerImage != pull(1) || rel.OSImageURL.BaseOSContainerImage != pull(1) {
		t.Errorf("osimageurl: %+v", rel.OSImageURL)
	}
	if len(rel.ManifestFiles) != 1 || rel.ManifestFiles[0] != "0000_50_installer_coreos-bootimages.yaml" {
		t.Errorf("manifest files: %v", rel.ManifestFiles)
	}
	if got := rel.References.ComponentTags()["machine-os"]; got != "stream-coreos" {
		t.Errorf("machine-os component tag %q", got)
	}
}

func TestReadReleaseBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"no image-references", map[string][]byte{"release-metadata": []byte(`{"version":"1"}`)}, "no release-manifests/image-references"},
		{"not an ImageStream", map[string][]byte{"image-references": []byte(`{"kind":"List","apiVersion":"v1"}`)}, `kind "List" apiVersion "v1", expected kind ImageStream apiVersion image.openshift.io/v1`},
		{"wrong apiVersion", map[string][]byte{"image-references": []byte(`{"kind":"ImageStream","apiVersion":"v1"}`)}, "expected kind ImageStream"},
		{"bad release-metadata", map[string][]byte{"image-references": imageReferences("x"), "release-metadata": []byte(`{`)}, "parsing release-metadata"},
		{"bad streams.json", map[string][]byte{"image-references": imageReferences("x"),
			"0000_80_machine-config_05_osimageurl.yaml": []byte("kind: ConfigMap\ndata:\n  streams.json: '{'\n")}, `streams.json`},
	} {
		_, err := ReadRelease(bytes.NewReader(releaseLayer(t, tc.files)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := ReadRelease(strings.NewReader("not a tar at all, just text that is long enough to fail the header check.............................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................")); err == nil {
		t.Error("garbage: no error")
	}
}

func TestResolveOrder(t *testing.T) {
	full := []tag{
		{name: "rhel-coreos", pull: pull(1), versions: "machine-os=9.6.20260327-0"},
		{name: "stream-coreos", pull: pull(2), versions: "machine-os=10.0.20250628-0"},
		{name: "stream-coreos-extensions", pull: pull(3)},
		{name: "machine-os-images", pull: pull(4)},
	}
	for _, tc := range []struct {
		name                      string
		tags                      []tag
		configMap                 []byte
		opts                      Options
		labels                    map[string]map[string]string
		wantTag, wantBy, wantRcp  string
		wantImage, wantMachineOS  string
		wantDetected, wantMOImage bool
	}{
		{name: "os-tag wins", tags: full, opts: Options{OSTag: "rhel-coreos"},
			configMap: osImageURLConfigMap("stream-coreos", map[string]string{"stream-coreos": pull(2)}),
			wantTag:   "rhel-coreos", wantBy: ByOSTag, wantRcp: "rhcos", wantImage: pull(1), wantMachineOS: "9.6.20260327-0", wantDetected: true, wantMOImage: true},
		{name: "configmap default stream", tags: full,
			configMap: osImageURLConfigMap("rhel-coreos", map[string]string{"stream-coreos": pull(2), "rhel-coreos": pull(1)}),
			wantTag:   "rhel-coreos", wantBy: ByConfigMap, wantRcp: "rhcos", wantImage: pull(1), wantMachineOS: "9.6.20260327-0", wantDetected: true, wantMOImage: true},
		{name: "configmap without streams.json", tags: full,
			configMap: []byte("kind: ConfigMap\ndata:\n  baseOSContainerImage: " + pull(1) + "\n"),
			wantTag:   "rhel-coreos", wantBy: ByConfigMap, wantRcp: "rhcos", wantImage: pull(1), wantMachineOS: "9.6.20260327-0", wantDetected: true, wantMOImage: true},
		{name: "configmap with placeholders falls through to tag list", tags: full,
			configMap: osImageURLConfigMap("x", map[string]string{"x": "placeholder.url.oc.will.replace.this.org/placeholdernamespace:rhel-coreos"}),
			wantTag:   "stream-coreos", wantBy: ByTagList, wantRcp: "scos", wantImage: pull(2), wantMachineOS: "10.0.20250628-0", wantDetected: true, wantMOImage: true},
		{name: "tag list prefers scos", tags: full,
			wantTag: "stream-coreos", wantBy: ByTagList, wantRcp: "scos", wantImage: pull(2), wantMachineOS: "10.0.20250628-0", wantDetected: true, wantMOImage: true},
		{name: "explicit recipe", tags: full, opts: Options{Recipe: "rhcos"},
			wantTag: "rhel-coreos", wantBy: ByTagList, wantRcp: "rhcos", wantImage: pull(1), wantMachineOS: "9.6.20260327-0", wantMOImage: true},
		{name: "older okd tag", tags: []tag{{name: "centos-stream-coreos-9", pull: pull(5)}},
			wantTag: "centos-stream-coreos-9", wantBy: ByTagList, wantRcp: "scos", wantImage: pull(5), wantDetected: true},
		{name: "label scan", tags: []tag{{name: "rhel-coreos-11", pull: pull(6)}, {name: "rhel-coreos-11-extensions", pull: pull(7)}},
			labels:  map[string]map[string]string{pull(6): {OSStreamLabel: "rhel-coreos-10"}},
			wantTag: "rhel-coreos-11", wantBy: ByLabel, wantRcp: "rhcos", wantImage: pull(6), wantDetected: true},
		{name: "label scan via source-location", tags: []tag{{name: "node-image", pull: pull(8), source: "https://github.com/openshift/os"}},
			labels:  map[string]map[string]string{pull(8): {OSStreamLabel: "custom"}},
			wantTag: "node-image", wantBy: ByLabel, wantImage: pull(8)},
		{name: "machine-os component", tags: []tag{{name: "pod", pull: pull(9)}, {name: "node", pull: pull(10), versions: "machine-os=1.2.3"}},
			wantTag: "node", wantBy: ByMachineOS, wantImage: pull(10), wantMachineOS: "1.2.3"},
		{name: "tag by name resolved to digest", tags: []tag{{name: "fedora-coreos", pull: "quay.io/fedora/fedora-coreos:stable"}},
			labels:  map[string]map[string]string{"quay.io/fedora/fedora-coreos:stable": {OSStreamLabel: "stable"}},
			wantTag: "fedora-coreos", wantBy: ByTagList, wantRcp: "fcos", wantImage: "quay.io/fedora/fedora-coreos@" + digestA, wantDetected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{"image-references": imageReferences("4.19.0", tc.tags...)}
			if tc.configMap != nil {
				files["0000_80_machine-config_05_osimageurl.yaml"] = tc.configMap
			}
			src := &fakeSource{release: releaseLayer(t, files), labels: tc.labels,
				digests: map[string]string{"quay.io/fedora/fedora-coreos:stable": "quay.io/fedora/fedora-coreos@" + digestA}}
			got, err := Resolve(context.Background(), src, "quay.io/okd/release:4.19", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got.OSTag != tc.wantTag || got.FoundBy != tc.wantBy || got.Recipe != tc.wantRcp || got.OSImage != tc.wantImage ||
				got.MachineOSVersion != tc.wantMachineOS || got.RecipeDetected != tc.wantDetected || (got.MachineOSImages != "") != tc.wantMOImage {
				t.Errorf("got %+v", got)
			}
			if got.Version != "4.19.0" || got.ReleaseDigestRef != "quay.io/okd/release@"+digestA {
				t.Errorf("version %q digest ref %q", got.Version, got.ReleaseDigestRef)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	tags := []tag{{name: "pod", pull: pull(1)}, {name: "cli", pull: pull(2)}}
	src := &fakeSource{release: releaseLayer(t, map[string][]byte{"image-references": imageReferences("4.19.0", tags...)})}
	_, err := Resolve(context.Background(), src, "quay.io/okd/release:4.19", Options{OSTag: "stream-coreos"})
	if err == nil || !strings.Contains(err.Error(), `no image tag "stream-coreos"`) || !strings.Contains(err.Error(), "tags present: cli, pod") {
		t.Errorf("unknown os-tag: got %v", err)
	}
	_, err = Resolve(context.Background(), src, "quay.io/okd/release:4.19", Options{})
	if err == nil || !strings.Contains(err.Error(), "no OS image tag found") || !strings.Contains(err.Error(), "tags present: cli, pod") ||
		!strings.Contains(err.Error(), "stream-coreos") {
		t.Errorf("no OS tag: got %v", err)
	}
	_, err = Resolve(context.Background(), src, "quay.io/okd/release:4.19", Options{Recipe: "debian"})
	if err == nil || !strings.Contains(err.Error(), "valid: scos, fcos, rhcos") {
		t.Errorf("unknown recipe: got %v", err)
	}
	_, err = Resolve(context.Background(), &fakeSource{}, "quay.io/okd/release:4.19", Options{})
	if err == nil || !strings.Contains(err.Error(), "quay.io/okd/release:4.19") {
		t.Errorf("unreadable release: got %v", err)
	}
	noRefs := &fakeSource{release: releaseLayer(t, map[string][]byte{"release-metadata": []byte(`{}`)})}
	_, err = Resolve(context.Background(), noRefs, "quay.io/okd/release:4.19", Options{})
	if err == nil || !strings.Contains(err.Error(), "no release-manifests/image-references") {
		t.Errorf("payload without image-references: got %v", err)
	}
}
