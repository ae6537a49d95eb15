package publish

import (
	"fmt"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types of the oci-artifact form.
const (
	// ArtifactTypeISO is the established disk-image artifact type for a live
	// ISO (coreos-assembler import, Flight Control); also the layer's media type.
	ArtifactTypeISO = "application/vnd.diskimage.iso"
	// ArtifactTypeStream marks the stream JSON artifact. Invented by
	// scos-builder: there is no established media type for CoreOS streams.
	ArtifactTypeStream = "application/vnd.coreos.stream+json"
	// ArtifactTypePrefix is what consumers match to find disk images.
	ArtifactTypePrefix = "application/vnd.diskimage."
)

// writeOCIArtifacts writes an index of one ISO artifact per build plus the
// stream artifact.
func writeOCIArtifacts(l *layout, builds []*Build, streamJSON []byte, streamFileName string, created time.Time) (ocispec.Descriptor, error) {
	empty, err := l.putBytes(ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	empty.Data = ocispec.DescriptorEmptyJSON.Data
	createdStr := created.UTC().Format(time.RFC3339)
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	for _, b := range builds {
		layer, err := l.putFile(ArtifactTypeISO, b.ISOFile)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("writing ISO artifact for %s: %w", b.Arch, err)
		}
		if layer.Digest.Encoded() != b.ISO.Sha256 {
			return ocispec.Descriptor{}, fmt.Errorf("writing ISO artifact for %s: %s changed since it was checked against the stream", b.Arch, b.ISOFile)
		}
		layer.Annotations = map[string]string{ocispec.AnnotationTitle: filepath.Base(b.ISOFile)}
		desc, err := l.putJSON(ocispec.MediaTypeImageManifest, ocispec.Manifest{
			Versioned:    specs.Versioned{SchemaVersion: 2},
			MediaType:    ocispec.MediaTypeImageManifest,
			ArtifactType: ArtifactTypeISO,
			Config:       empty,
			Layers:       []ocispec.Descriptor{layer},
			Annotations: map[string]string{
				ocispec.AnnotationCreated: createdStr,
				ocispec.AnnotationVersion: b.Release,
			},
		})
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		desc.ArtifactType = ArtifactTypeISO
		desc.Platform = &ocispec.Platform{OS: "linux", Architecture: b.GoArch}
		idx.Manifests = append(idx.Manifests, desc)
	}
	layer, err := l.putBytes(ArtifactTypeStream, streamJSON)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	layer.Annotations = map[string]string{ocispec.AnnotationTitle: streamFileName}
	desc, err := l.putJSON(ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactTypeStream,
		Config:       empty,
		Layers:       []ocispec.Descriptor{layer},
		Annotations:  map[string]string{ocispec.AnnotationCreated: createdStr},
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc.ArtifactType = ArtifactTypeStream
	idx.Manifests = append(idx.Manifests, desc)
	return l.putJSON(ocispec.MediaTypeImageIndex, idx)
}
