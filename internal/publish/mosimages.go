package publish

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// LabelReleaseOperator marks an image whose /manifests belong in a release
// payload; machine-os-images carries it.
const LabelReleaseOperator = "io.openshift.release.operator"

// Paths inside the machine-os-images image, as the agent installer reads
// them (openshift/installer pkg/asset/agent/image/baseiso.go).
func machineOSImagesISOPath(arch string) string { return "coreos/coreos-" + arch + ".iso" }
func machineOSImagesSHAPath(arch string) string { return machineOSImagesISOPath(arch) + ".sha256" }

const machineOSImagesStreamPath = "coreos/coreos-stream.json"

// Manifest formats of the machine-os-images form (podman push --format names).
const (
	// ManifestV2S2 writes a Docker manifest list of Docker schema 2
	// manifests: what every oc version reads.
	ManifestV2S2 = "v2s2"
	// ManifestOCI writes an OCI image index of OCI manifests (oc reads OCI
	// indexes since openshift/oc#1362, 2023).
	ManifestOCI = "oci"
)

// ManifestFormats lists the valid manifest formats.
func ManifestFormats() []string { return []string{ManifestV2S2, ManifestOCI} }

// mediaTypes are the media types of one manifest format.
type mediaTypes struct {
	index, manifest, config, layerGzip string
}

func mediaTypesFor(format string) (mediaTypes, error) {
	switch format {
	case ManifestV2S2:
		return mediaTypes{
			index:     "application/vnd.docker.distribution.manifest.list.v2+json",
			manifest:  "application/vnd.docker.distribution.manifest.v2+json",
			config:    "application/vnd.docker.container.image.v1+json",
			layerGzip: "application/vnd.docker.image.rootfs.diff.tar.gzip",
		}, nil
	case ManifestOCI:
		return mediaTypes{
			index:     ocispec.MediaTypeImageIndex,
			manifest:  ocispec.MediaTypeImageManifest,
			config:    ocispec.MediaTypeImageConfig,
			layerGzip: ocispec.MediaTypeImageLayerGzip,
		}, nil
	}
	return mediaTypes{}, fmt.Errorf("unknown manifest format %q (valid: v2s2, oci)", format)
}

// baseImage is a base image copied into a scratch layout for one platform.
type baseImage struct {
	from     *layout
	manifest ocispec.Manifest
	config   ocispec.Image
}

// writeMachineOSImages writes one image per build and an index over them.
func writeMachineOSImages(l *layout, mt mediaTypes, builds []*Build, streamJSON []byte, created time.Time, bases map[string]*baseImage) (ocispec.Descriptor, error) {
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: mt.index}
	for _, b := range builds {
		desc, err := writeMachineOSImage(l, mt, b, streamJSON, created, bases[b.GoArch])
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("writing machine-os-images image for %s: %w", b.Arch, err)
		}
		desc.Platform = &ocispec.Platform{OS: "linux", Architecture: b.GoArch}
		idx.Manifests = append(idx.Manifests, desc)
	}
	return l.putJSON(mt.index, idx)
}

func writeMachineOSImage(l *layout, mt mediaTypes, b *Build, streamJSON []byte, created time.Time, base *baseImage) (ocispec.Descriptor, error) {
	var diffID digest.Digest
	layer, err := l.putStream(mt.layerGzip, func(w io.Writer) error {
		var err error
		diffID, err = writeCoreOSLayer(w, b, streamJSON, created)
		return err
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("writing /coreos layer: %w", err)
	}

	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: b.GoArch},
		RootFS:   ocispec.RootFS{Type: "layers"},
	}
	var layers []ocispec.Descriptor
	if base != nil {
		cfg = base.config
		if cfg.Architecture != b.GoArch || cfg.OS != "linux" {
			return ocispec.Descriptor{}, fmt.Errorf("base image is for %s/%s, want linux/%s", cfg.OS, cfg.Architecture, b.GoArch)
		}
		for _, bl := range base.manifest.Layers {
			if err := l.copyBlobFrom(base.from, bl); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("copying base image layer: %w", err)
			}
			layers = append(layers, bl)
		}
	}
	cfg.Created = &created
	labels := map[string]string{}
	for k, v := range cfg.Config.Labels {
		labels[k] = v
	}
	labels[LabelReleaseOperator] = "true"
	cfg.Config.Labels = labels
	cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diffID)
	cfg.History = append(cfg.History, ocispec.History{
		Created:   &created,
		CreatedBy: "scos-builder publish --format machine-os-images",
		Comment:   fmt.Sprintf("/coreos/coreos-%s.iso from %s", b.Arch, b.Release),
	})
	cfgDesc, err := l.putJSON(mt.config, cfg)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: mt.manifest,
		Config:    cfgDesc,
		Layers:    append(layers, layer),
	}
	return l.putJSON(mt.manifest, m)
}

// writeCoreOSLayer writes the gzip-compressed tar of /coreos and returns
// the digest of the uncompressed tar (the diff ID).
func writeCoreOSLayer(w io.Writer, b *Build, streamJSON []byte, mtime time.Time) (digest.Digest, error) {
	gz, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return "", err
	}
	diff := digest.Canonical.Digester()
	tw := tar.NewWriter(io.MultiWriter(gz, diff.Hash()))
	hdr := func(name string, mode int64, typ byte, size int64) *tar.Header {
		return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: mtime, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr("coreos/", 0o755, tar.TypeDir, 0)); err != nil {
		return "", err
	}
	iso, err := os.Open(b.ISOFile)
	if err != nil {
		return "", err
	}
	defer iso.Close()
	fi, err := iso.Stat()
	if err != nil {
		return "", err
	}
	// Entries in name order (where coreos-stream.json falls depends on the arch).
	type entry struct {
		name string
		size int64
		body func(io.Writer) error
	}
	entries := []entry{
		{machineOSImagesISOPath(b.Arch), fi.Size(), func(w io.Writer) error {
			check := digest.Canonical.Digester()
			if _, err := io.Copy(io.MultiWriter(w, check.Hash()), iso); err != nil {
				return err
			}
			if check.Digest().Encoded() != b.ISO.Sha256 {
				return fmt.Errorf("%s changed since it was checked against the stream", b.ISOFile)
			}
			return nil
		}},
		{machineOSImagesSHAPath(b.Arch), int64(len(b.ISO.Sha256)), func(w io.Writer) error {
			_, err := io.WriteString(w, b.ISO.Sha256) // hex only, no newline: the installer hex-decodes it
			return err
		}},
		{machineOSImagesStreamPath, int64(len(streamJSON)), func(w io.Writer) error {
			_, err := w.Write(streamJSON)
			return err
		}},
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	for _, e := range entries {
		if err := tw.WriteHeader(hdr(e.name, 0o644, tar.TypeReg, e.size)); err != nil {
			return "", err
		}
		if err := e.body(tw); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return diff.Digest(), nil
}
