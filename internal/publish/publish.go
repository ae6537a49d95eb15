package publish

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Formats of publish.
const (
	FormatMachineOSImages = "machine-os-images"
	FormatOCIArtifact     = "oci-artifact"
)

// Formats lists the valid formats.
func Formats() []string { return []string{FormatMachineOSImages, FormatOCIArtifact} }

// LayoutOptions control what WriteLayout writes.
type LayoutOptions struct {
	// Format is FormatMachineOSImages or FormatOCIArtifact.
	Format string
	// Created timestamps configs, tar entries and annotations; zero means
	// the newest metadata.last-modified of the input streams.
	Created time.Time
	// ManifestFormat (machine-os-images only) is ManifestV2S2 (default) or
	// ManifestOCI.
	ManifestFormat string
	// BaseImage (machine-os-images only) is a registry reference whose
	// linux/<goarch> image supplies the lower layers and config.
	BaseImage string
	// Registry is used to pull BaseImage.
	Registry RegistryOptions
}

// WriteLayout writes the builds in the chosen format into the OCI layout
// dir (created if needed), tags the top index tag in index.json and returns
// its descriptor.
func WriteLayout(ctx context.Context, builds []*Build, dir, tag string, o LayoutOptions) (ocispec.Descriptor, error) {
	return writeLayout(ctx, builds, dir, tag, o, false)
}

func writeLayout(ctx context.Context, builds []*Build, dir, tag string, o LayoutOptions, linkFiles bool) (ocispec.Descriptor, error) {
	if o.Format != FormatMachineOSImages && o.Format != FormatOCIArtifact {
		return ocispec.Descriptor{}, fmt.Errorf("unknown publish format %q (valid: %s)", o.Format, strings.Join(Formats(), ", "))
	}
	if o.Format != FormatMachineOSImages && (o.BaseImage != "" || o.ManifestFormat != "") {
		return ocispec.Descriptor{}, fmt.Errorf("a base image and a manifest format apply only to format %s", FormatMachineOSImages)
	}
	if o.ManifestFormat == "" {
		o.ManifestFormat = ManifestV2S2
	}
	mt, err := mediaTypesFor(o.ManifestFormat)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	merged, err := mergedStream(builds)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	streamJSON, err := merged.Marshal()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	created := o.Created
	if created.IsZero() {
		// Merge took the newest last-modified; it parsed as RFC 3339 in Validate.
		created, err = time.Parse(time.RFC3339, merged.Metadata.LastModified)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("reading stream last-modified: %w", err)
		}
	}
	created = created.UTC()
	l, err := openLayout(dir)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	l.linkFiles = linkFiles
	var top ocispec.Descriptor
	switch o.Format {
	case FormatMachineOSImages:
		bases := map[string]*baseImage{}
		if o.BaseImage != "" {
			scratch, err := os.MkdirTemp(dir, ".base-")
			if err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("pulling base image: %w", err)
			}
			defer os.RemoveAll(scratch)
			for _, b := range builds {
				if bases[b.GoArch], err = loadBase(ctx, o.BaseImage, b.GoArch, mt, scratch, o.Registry); err != nil {
					return ocispec.Descriptor{}, err
				}
			}
		}
		top, err = writeMachineOSImages(l, mt, builds, streamJSON, created, bases)
	case FormatOCIArtifact:
		top, err = writeOCIArtifacts(l, builds, streamJSON, filepath.Base(builds[0].StreamFile), created)
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := l.tag(tag, top); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("tagging %s in OCI layout %s: %w", tag, dir, err)
	}
	return top, nil
}

// loadBase pulls the base image's platform image into a scratch layout and
// reads its manifest and config.
func loadBase(ctx context.Context, ref, goarch string, mt mediaTypes, scratch string, ro RegistryOptions) (*baseImage, error) {
	if err := pullPlatform(ctx, ref, goarch, mt.manifest, scratch, goarch, ro); err != nil {
		return nil, err
	}
	sl := &layout{dir: scratch}
	desc, err := sl.resolve(goarch)
	if err != nil {
		return nil, fmt.Errorf("reading base image %s: %w", ref, err)
	}
	b := &baseImage{from: sl}
	if err := sl.readJSON(desc, &b.manifest); err != nil {
		return nil, fmt.Errorf("reading base image %s: %w", ref, err)
	}
	if b.manifest.MediaType != mt.manifest {
		return nil, fmt.Errorf("reading base image %s: manifest type %s, want %s", ref, b.manifest.MediaType, mt.manifest)
	}
	if err := sl.readJSON(b.manifest.Config, &b.config); err != nil {
		return nil, fmt.Errorf("reading base image %s config: %w", ref, err)
	}
	return b, nil
}

// Options for Publish.
type Options struct {
	LayoutOptions
	// To is the registry reference to push to; empty: only write the layout.
	To string
	// LayoutDir keeps the OCI layout there; empty: a temporary directory.
	LayoutDir string
	// Tag names the index in the layout; default "latest".
	Tag string
}

// Result says what Publish wrote.
type Result struct {
	// Digest of the top index (equal in the layout and the registry).
	Digest digest.Digest
	// LayoutDir is where the layout is, when kept.
	LayoutDir string
	// Pushed is the reference pushed to, when pushed.
	Pushed string
}

// Publish loads the build directories, writes the layout and pushes it.
func Publish(ctx context.Context, dirs []string, o Options) (*Result, error) {
	if o.To == "" && o.LayoutDir == "" {
		return nil, fmt.Errorf("publishing: nothing to do: give a registry reference to push to or an OCI layout directory")
	}
	if o.To != "" {
		if _, err := parseRegistryRef(o.To); err != nil {
			return nil, fmt.Errorf("publishing: %w", err)
		}
	}
	builds, err := LoadBuilds(dirs)
	if err != nil {
		return nil, fmt.Errorf("publishing: %w", err)
	}
	if o.Tag == "" {
		o.Tag = "latest"
	}
	res := &Result{LayoutDir: o.LayoutDir}
	dir := o.LayoutDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "scos-builder-publish-")
		if err != nil {
			return nil, fmt.Errorf("publishing: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	desc, err := writeLayout(ctx, builds, dir, o.Tag, o.LayoutOptions, o.LayoutDir == "")
	if err != nil {
		return nil, fmt.Errorf("publishing: %w", err)
	}
	res.Digest = desc.Digest
	if o.To == "" {
		return res, nil
	}
	pushed, err := Push(ctx, dir, o.Tag, o.To, o.Registry)
	if err != nil {
		return nil, fmt.Errorf("publishing: %w", err)
	}
	if pushed != desc.Digest {
		return nil, fmt.Errorf("publishing: registry stored index %s, written %s", pushed, desc.Digest)
	}
	res.Pushed = o.To
	return res, nil
}
