package stages

import (
	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/payload"
	"github.com/okd-project/scos-builder/internal/registry"
	"github.com/okd-project/scos-builder/recipes"
)

// Config is everything the resolve phase found and the user chose; the
// stage list is a pure function of it.
type Config struct {
	// Payload is the release image (empty for --image builds) and
	// Resolved what it says.
	Payload  string
	Resolved *payload.Resolved
	// OSImage is the OS image reference and OSImageDigest the digest of
	// its per-architecture manifest; Labels are its config labels.
	OSImage       string
	OSImageDigest string
	Labels        map[string]string
	// Arch is the RPM architecture (x86_64, aarch64…).
	Arch   string
	Recipe *recipes.Recipe
	// Release is the build id written into artifact names and the stream.
	Release string
	// Kargs are appended to the live kernel command line (--karg).
	Kargs []string
	// Ignition is a config to embed into the ISO (nil: none).
	Ignition []byte
	// RootfsBuilder is native or mksquashfs; RootfsFSType overrides the
	// image's live-rootfs-fstype when set.
	RootfsBuilder string
	RootfsFSType  string
	// SyslinuxDir overrides where the BIOS boot files are taken from.
	SyslinuxDir string
	// AllowNoEFI builds a BIOS-only ISO when the image has no EFI binaries.
	AllowNoEFI bool
	// BaseURL prefixes the stream's artifact locations.
	BaseURL string
	// Version is scos-builder's version (the stream generator).
	Version string
	// SourceDateEpoch fixes every timestamp.
	SourceDateEpoch int64
	// Client reads images (not part of any cache key).
	Client *registry.Client
}

// New returns the build's stages in execution order.
func New(cfg *Config) []builder.Stage {
	isoStage := TypeISOMaster
	list := []builder.Stage{
		&PayloadResolve{Opts: PayloadResolveOptions{Payload: cfg.Payload, Resolved: cfg.Resolved, OSImage: cfg.OSImage, Recipe: cfg.Recipe.Name}},
		&ImageFetch{Opts: ImageFetchOptions{Ref: cfg.OSImage, Digest: cfg.OSImageDigest, Arch: cfg.Arch}, Client: cfg.Client},
	}
	list = append(list, liveStages(cfg)...)
	if cfg.Ignition != nil {
		isoStage = TypeISOCustomize
		list = append(list, &ISOCustomize{Opts: ISOCustomizeOptions{Ignition: string(cfg.Ignition)}})
	}
	list = append(list, &StreamEmit{Opts: StreamEmitOptions{
		Prefix: cfg.Recipe.ArtifactPrefix, Release: cfg.Release, Arch: cfg.Arch, StreamName: cfg.Recipe.Stream,
		GeneratorVersion: cfg.Version, BaseURL: cfg.BaseURL, SourceDateEpoch: cfg.SourceDateEpoch, ISOStage: isoStage,
	}})
	return list
}
