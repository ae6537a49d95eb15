// Package payload reads OpenShift/OKD release payload metadata and finds
// the OS (node) image in it. It is a pure format library: image access is
// behind the small Source interface, so it knows nothing about registries.
//
// Contract: ReadRelease parses the release image's last layer (a tar
// stream) the way `oc adm release info` does: release-manifests/
// image-references must be an ImageStream of apiVersion
// image.openshift.io/v1; release-metadata and the machine-config
// osimageurl ConfigMap are optional. Resolve picks the OS image in a fixed,
// documented order and reports which rule chose it.
package payload

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Paths inside the release image's last layer.
const (
	ImageReferencesPath = "release-manifests/image-references"
	ReleaseMetadataPath = "release-manifests/release-metadata"
)

// osImageURLPath matches the machine-config-operator ConfigMap that names
// the OS image (0000_80_machine-config_05_osimageurl.yaml, older releases
// 0000_80_machine-config-operator_05_osimageurl.yaml).
var osImageURLPath = regexp.MustCompile(`^release-manifests/0000_80_machine-config[a-z-]*_05_osimageurl\.ya?ml$`)

// maxFileSize bounds one metadata file read from the layer.
const maxFileSize = 64 << 20

// ImageStream is the image-references document (the fields oc reads).
type ImageStream struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		Name              string            `json:"name,omitempty"`
		CreationTimestamp string            `json:"creationTimestamp,omitempty"`
		Annotations       map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Tags []Tag `json:"tags"`
	} `json:"spec"`
}

// Tag is one image of the release.
type Tag struct {
	Name        string            `json:"name"`
	Annotations map[string]string `json:"annotations,omitempty"`
	From        *struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"from,omitempty"`
}

// PullSpec is the tag's image pull spec, or "" when it is not a DockerImage.
func (t *Tag) PullSpec() string {
	if t.From == nil || t.From.Kind != "DockerImage" {
		return ""
	}
	return t.From.Name
}

// Versions parses the io.openshift.build.versions annotation
// ("machine-os=9.6.20260327-0,kubernetes=1.31.0").
func (t *Tag) Versions() map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(t.Annotations["io.openshift.build.versions"], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// ParseImageReferences parses image-references (JSON, or YAML as in the
// per-operator files) and checks that it is an image.openshift.io/v1
// ImageStream.
func ParseImageReferences(data []byte) (*ImageStream, error) {
	var is ImageStream
	if err := yaml.Unmarshal(data, &is); err != nil {
		return nil, fmt.Errorf("parsing image-references: %w", err)
	}
	if is.Kind != "ImageStream" || is.APIVersion != "image.openshift.io/v1" {
		return nil, fmt.Errorf("parsing image-references: kind %q apiVersion %q, expected kind ImageStream apiVersion image.openshift.io/v1", is.Kind, is.APIVersion)
	}
	return &is, nil
}

// Tag returns the tag called name.
func (is *ImageStream) Tag(name string) (*Tag, bool) {
	for i := range is.Spec.Tags {
		if is.Spec.Tags[i].Name == name {
			return &is.Spec.Tags[i], true
		}
	}
	return nil, false
}

// TagNames lists the tag names, sorted.
func (is *ImageStream) TagNames() []string {
	names := make([]string, 0, len(is.Spec.Tags))
	for _, t := range is.Spec.Tags {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

// ComponentTags maps each component named in io.openshift.build.versions
// to the tag declaring it; as in oc, the last tag wins.
func (is *ImageStream) ComponentTags() map[string]string {
	out := map[string]string{}
	for i := range is.Spec.Tags {
		for k := range is.Spec.Tags[i].Versions() {
			out[k] = is.Spec.Tags[i].Name
		}
	}
	return out
}

// Metadata is release-metadata (oc's CincinnatiMetadata).
type Metadata struct {
	Kind     string         `json:"kind"`
	Version  string         `json:"version"`
	Previous []string       `json:"previous,omitempty"`
	Next     []string       `json:"next,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// OSImageURL is the data of the machine-config osimageurl ConfigMap.
type OSImageURL struct {
	BaseOSContainerImage           string
	BaseOSExtensionsContainerImage string
	ReleaseVersion                 string
	// Streams is data."streams.json" when present.
	Streams *OSImageStreams
}

// OSImageStreams is the streams.json document of the osimageurl ConfigMap.
type OSImageStreams struct {
	Default string                   `json:"default"`
	Streams map[string]OSImageStream `json:"streams"`
}

// OSImageStream names one stream's OS and extensions images.
type OSImageStream struct {
	BaseOSContainerImage           string `json:"baseOSContainerImage"`
	BaseOSExtensionsContainerImage string `json:"baseOSExtensionsContainerImage"`
}

// ParseOSImageURL parses the osimageurl ConfigMap.
func ParseOSImageURL(data []byte) (*OSImageURL, error) {
	var cm struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return nil, fmt.Errorf("parsing osimageurl ConfigMap: %w", err)
	}
	if cm.Kind != "ConfigMap" {
		return nil, fmt.Errorf("parsing osimageurl ConfigMap: kind %q, expected ConfigMap", cm.Kind)
	}
	u := &OSImageURL{
		BaseOSContainerImage:           cm.Data["baseOSContainerImage"],
		BaseOSExtensionsContainerImage: cm.Data["baseOSExtensionsContainerImage"],
		ReleaseVersion:                 cm.Data["releaseVersion"],
	}
	if s := cm.Data["streams.json"]; s != "" {
		u.Streams = &OSImageStreams{}
		if err := json.Unmarshal([]byte(s), u.Streams); err != nil {
			return nil, fmt.Errorf("parsing osimageurl ConfigMap data.\"streams.json\": %w", err)
		}
	}
	return u, nil
}

// Release is the metadata read from a release image's last layer.
type Release struct {
	References *ImageStream
	Metadata   *Metadata   // nil when release-metadata is absent
	OSImageURL *OSImageURL // nil when the ConfigMap is absent
	// ManifestFiles lists the other manifests in release-manifests/, sorted.
	ManifestFiles []string
}

// Version is release-metadata's version, else the ImageStream's name.
func (r *Release) Version() string {
	if r.Metadata != nil && r.Metadata.Version != "" {
		return r.Metadata.Version
	}
	return r.References.Metadata.Name
}

// ReadRelease reads the release image's last layer, an uncompressed tar.
func ReadRelease(r io.Reader) (*Release, error) {
	rel := &Release{}
	tr := tar.NewReader(r)
	var refs, meta, osURL []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading release layer: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if !strings.HasPrefix(name, "release-manifests/") {
			continue
		}
		var dst *[]byte
		switch {
		case name == ImageReferencesPath:
			dst = &refs
		case name == ReleaseMetadataPath:
			dst = &meta
		case osImageURLPath.MatchString(name):
			dst = &osURL
		default:
			rel.ManifestFiles = append(rel.ManifestFiles, strings.TrimPrefix(name, "release-manifests/"))
			continue
		}
		if h.Size > maxFileSize {
			return nil, fmt.Errorf("reading release layer: %s is %d bytes, more than the %d allowed", name, h.Size, maxFileSize)
		}
		if *dst, err = io.ReadAll(tr); err != nil {
			return nil, fmt.Errorf("reading release layer: %s: %w", name, err)
		}
	}
	if refs == nil {
		return nil, fmt.Errorf("reading release layer: no %s (is this a release image?)", ImageReferencesPath)
	}
	var err error
	if rel.References, err = ParseImageReferences(refs); err != nil {
		return nil, err
	}
	if meta != nil {
		rel.Metadata = &Metadata{}
		if err := json.Unmarshal(meta, rel.Metadata); err != nil {
			return nil, fmt.Errorf("parsing release-metadata: %w", err)
		}
	}
	if osURL != nil {
		if rel.OSImageURL, err = ParseOSImageURL(osURL); err != nil {
			return nil, err
		}
	}
	sort.Strings(rel.ManifestFiles)
	return rel, nil
}
