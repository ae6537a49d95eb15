// Package stream reads, writes, builds, merges and validates CoreOS stream
// metadata: the JSON document (schema of github.com/coreos/stream-metadata-go)
// that lists, per architecture and platform, the boot artifacts of a build
// with their locations and sha256 digests. The OpenShift installer embeds one
// (data/data/coreos/scos.json) and the agent installer reads one from the
// machine-os-images image (/coreos/coreos-stream.json).
//
// Contract:
//   - Parse accepts only documents it can re-encode without loss: every field,
//     including architectures.<arch>.images and rhel-coreos-extensions, is
//     typed here; a field this package does not know is an error naming its
//     JSON path instead of being dropped silently.
//   - Marshal writes 2-space indented JSON with sorted map keys and a final
//     newline, so the same Stream always gives the same bytes.
//   - Architecture keys are RPM names (x86_64, aarch64, ppc64le, s390x,
//     riscv64); GoArch maps them to Go/OCI names.
//
// The package knows nothing about the build pipeline; NewLiveStream hashes
// files a caller names.
package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
)

// Stream is a CoreOS stream: the artifacts of one build per architecture.
type Stream struct {
	Stream        string          `json:"stream"`
	Metadata      Metadata        `json:"metadata"`
	Architectures map[string]Arch `json:"architectures"`
}

// Metadata says when and by what the stream was written.
type Metadata struct {
	// LastModified is RFC 3339 UTC, e.g. "2025-07-01T21:24:39Z".
	LastModified string `json:"last-modified"`
	// Generator names the writer, e.g. "scos-builder v0.1.0".
	Generator string `json:"generator,omitempty"`
}

// Arch holds one architecture's artifacts (by platform: metal, qemu, aws …)
// and cloud images.
type Arch struct {
	Artifacts            map[string]PlatformArtifacts `json:"artifacts"`
	Images               *Images                      `json:"images,omitempty"`
	RHELCoreOSExtensions *Extensions                  `json:"rhel-coreos-extensions,omitempty"`
}

// PlatformArtifacts are the files of one platform, all from build Release.
type PlatformArtifacts struct {
	Release string                 `json:"release"`
	Formats map[string]ImageFormat `json:"formats"`
}

// ImageFormat is one format of a platform: a disk image (iso, raw.gz,
// qcow2.xz …) or the PXE triple.
type ImageFormat struct {
	Disk      *Artifact `json:"disk,omitempty"`
	Kernel    *Artifact `json:"kernel,omitempty"`
	Initramfs *Artifact `json:"initramfs,omitempty"`
	Rootfs    *Artifact `json:"rootfs,omitempty"`
}

// Artifact is one file: where it is and the sha256 of its exact bytes.
type Artifact struct {
	Location           string `json:"location"`
	Signature          string `json:"signature,omitempty"`
	Sha256             string `json:"sha256"`
	UncompressedSha256 string `json:"uncompressed-sha256,omitempty"`
}

// Images are the cloud images of one architecture.
type Images struct {
	Aliyun   *ReplicatedImage  `json:"aliyun,omitempty"`
	Aws      *ReplicatedImage  `json:"aws,omitempty"`
	Gcp      *GcpImage         `json:"gcp,omitempty"`
	Ibmcloud *ReplicatedObject `json:"ibmcloud,omitempty"`
	KubeVirt *ContainerImage   `json:"kubevirt,omitempty"`
	PowerVS  *ReplicatedObject `json:"powervs,omitempty"`
}

// ReplicatedImage is an image copied to several regions (AWS AMIs, Aliyun).
type ReplicatedImage struct {
	Regions map[string]SingleImage `json:"regions,omitempty"`
}

// SingleImage is an image in one region.
type SingleImage struct {
	Release string `json:"release"`
	Image   string `json:"image"`
}

// ReplicatedObject is an object stored in several regions (IBM Cloud, PowerVS).
type ReplicatedObject struct {
	Regions map[string]SingleObject `json:"regions,omitempty"`
}

// SingleObject is an object in one region's bucket.
type SingleObject struct {
	Release string `json:"release"`
	Object  string `json:"object"`
	Bucket  string `json:"bucket"`
	URL     string `json:"url"`
}

// GcpImage is a GCP image.
type GcpImage struct {
	Release string `json:"release,omitempty"`
	Project string `json:"project"`
	Family  string `json:"family,omitempty"`
	Name    string `json:"name"`
}

// ContainerImage is a container image (KubeVirt containerDisk).
type ContainerImage struct {
	Release   string `json:"release"`
	Image     string `json:"image"`
	DigestRef string `json:"digest-ref"`
}

// Extensions are the RHCOS-specific additions (stream-metadata-go
// stream/rhcos): Windows-licensed AWS AMIs, the Azure disk URL and Azure
// marketplace images.
type Extensions struct {
	AwsWinLi    *ReplicatedImage `json:"aws-winli,omitempty"`
	AzureDisk   *AzureDisk       `json:"azure-disk,omitempty"`
	Marketplace *Marketplace     `json:"marketplace,omitempty"`
}

// AzureDisk is a VHD in Azure blob storage.
type AzureDisk struct {
	Release string `json:"release"`
	URL     string `json:"url"`
}

// Marketplace lists marketplace images; Azure maps an offer name
// (no-purchase-plan, ocp, opp, oke, ocp-emea …) to its images.
type Marketplace struct {
	Azure map[string]AzureMarketplaceImages `json:"azure,omitempty"`
}

// AzureMarketplaceImages are an offer's images per Hyper-V generation.
type AzureMarketplaceImages struct {
	Gen1 *AzureMarketplaceImage `json:"hyperVGen1,omitempty"`
	Gen2 *AzureMarketplaceImage `json:"hyperVGen2,omitempty"`
}

// AzureMarketplaceImage is one Azure marketplace image.
type AzureMarketplaceImage struct {
	Publisher string `json:"publisher"`
	Offer     string `json:"offer"`
	SKU       string `json:"sku"`
	Version   string `json:"version"`
}

// Parse decodes a stream. It refuses documents that it would not re-encode
// identically (as JSON values): a field unknown to these types is reported
// with its path rather than lost.
func Parse(data []byte) (*Stream, error) {
	var s Stream
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decoding stream: %w", err)
	}
	var orig any
	if err := json.Unmarshal(data, &orig); err != nil {
		return nil, fmt.Errorf("decoding stream: %w", err)
	}
	again, err := json.Marshal(&s)
	if err != nil {
		return nil, fmt.Errorf("encoding stream: %w", err)
	}
	var back any
	if err := json.Unmarshal(again, &back); err != nil {
		return nil, fmt.Errorf("decoding stream: %w", err)
	}
	if path, ok := FirstDifference(orig, back); ok {
		return nil, fmt.Errorf("decoding stream: field %s is not part of the stream schema known to scos-builder (it would be lost)", path)
	}
	return &s, nil
}

// ReadFile reads and parses the stream in path.
func ReadFile(path string) (*Stream, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", path, err)
	}
	return s, nil
}

// Marshal encodes s with 2-space indentation and a final newline, as
// upstream stream files are written.
func (s *Stream) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding stream: %w", err)
	}
	return append(data, '\n'), nil
}

// WriteFile writes s to path through a temporary file renamed into place,
// so an interrupted write never leaves a partial stream at path.
func (s *Stream) WriteFile(path string) error {
	data, err := s.Marshal()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing stream %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing stream %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("writing stream %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing stream %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing stream %s: %w", path, err)
	}
	return nil
}

// Architecture returns the entry for arch, or an error listing the
// architectures the stream has.
func (s *Stream) Architecture(arch string) (*Arch, error) {
	a, ok := s.Architectures[arch]
	if !ok {
		return nil, fmt.Errorf("stream %q does not have architecture %q (it has: %s)", s.Stream, arch, listOrNone(sortedKeys(s.Architectures)))
	}
	return &a, nil
}

// LiveISO returns the metal ISO artifact of arch and the build it is from.
func (s *Stream) LiveISO(arch string) (Artifact, string, error) {
	a, err := s.Architecture(arch)
	if err != nil {
		return Artifact{}, "", err
	}
	metal, ok := a.Artifacts["metal"]
	if !ok {
		return Artifact{}, "", fmt.Errorf("stream %q, architecture %s: no metal artifacts (it has: %s)", s.Stream, arch, listOrNone(sortedKeys(a.Artifacts)))
	}
	iso, ok := metal.Formats["iso"]
	if !ok || iso.Disk == nil {
		return Artifact{}, "", fmt.Errorf("stream %q, architecture %s: no metal iso disk (formats: %s)", s.Stream, arch, listOrNone(sortedKeys(metal.Formats)))
	}
	return *iso.Disk, metal.Release, nil
}

// FirstDifference compares two decoded JSON values (as from json.Unmarshal
// into any) and returns the path of the first difference in sorted key
// order, e.g. "architectures.x86_64.images.foo".
func FirstDifference(a, b any) (string, bool) {
	return firstDiff("", a, b)
}

func firstDiff(path string, a, b any) (string, bool) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return orRoot(path), true
		}
		keys := make(map[string]bool)
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			x, inA := av[k]
			y, inB := bv[k]
			if inA != inB {
				return join(k), true
			}
			if p, d := firstDiff(join(k), x, y); d {
				return p, true
			}
		}
		return "", false
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return orRoot(path), true
		}
		for i := range av {
			if p, d := firstDiff(path+"["+strconv.Itoa(i)+"]", av[i], bv[i]); d {
				return p, true
			}
		}
		return "", false
	default:
		if !reflect.DeepEqual(a, b) {
			return orRoot(path), true
		}
		return "", false
	}
}

func orRoot(p string) string {
	if p == "" {
		return "(document)"
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	var b bytes.Buffer
	for i, s := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s)
	}
	return b.String()
}
