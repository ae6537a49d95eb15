package stages

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/stream"
)

// File names of the artifacts inside the stages' output directories.
const (
	ISOFile       = "live.iso"
	KernelFile    = "vmlinuz"
	InitrdFile    = "initrd.img"
	RootfsImgFile = "rootfs.img"
)

// StreamEmitOptions decide the stream JSON and the artifact names.
type StreamEmitOptions struct {
	Prefix           string `json:"prefix"`
	Release          string `json:"release"`
	Arch             string `json:"arch"`
	StreamName       string `json:"stream-name"`
	GeneratorVersion string `json:"generator-version"`
	BaseURL          string `json:"base-url,omitempty"`
	SourceDateEpoch  int64  `json:"source-date-epoch"`
	// ISOStage is the stage whose output holds the ISO (iso.master, or
	// iso.customize when an Ignition config is embedded).
	ISOStage string `json:"iso-stage"`
}

// Validate implements builder.Options.
func (o StreamEmitOptions) Validate() error {
	if o.Release == "" {
		return errors.New("release is empty: the OS image has no org.opencontainers.image.version label and no machine-os version is known")
	}
	if o.ISOStage != TypeISOMaster && o.ISOStage != TypeISOCustomize {
		return fmt.Errorf("iso-stage %q is not %s or %s", o.ISOStage, TypeISOMaster, TypeISOCustomize)
	}
	if _, err := stream.NormalizeBaseURL(o.BaseURL); err != nil {
		return fmt.Errorf("--base-url: %w", err)
	}
	_, err := stream.LiveArtifactNames(o.Prefix, o.Release, o.Arch)
	return err
}

// StreamEmit gathers the artifacts under their published names and
// describes them in the stream JSON.
type StreamEmit struct{ Opts StreamEmitOptions }

func (s *StreamEmit) Type() string             { return TypeStreamEmit }
func (s *StreamEmit) Version() int             { return 1 }
func (s *StreamEmit) Options() builder.Options { return s.Opts }
func (s *StreamEmit) Inputs() []string {
	return []string{s.Opts.ISOStage, TypeLiveInitrd, TypeLiveRootfs}
}
func (s *StreamEmit) Tools() []string { return nil }

func (s *StreamEmit) Run(ctx context.Context, rc *builder.RunContext) error {
	names, err := stream.LiveArtifactNames(s.Opts.Prefix, s.Opts.Release, s.Opts.Arch)
	if err != nil {
		return err
	}
	links := []struct{ src, dst string }{
		{filepath.Join(rc.Inputs[s.Opts.ISOStage], ISOFile), names.ISO},
		{filepath.Join(rc.Inputs[TypeLiveInitrd], KernelFile), names.Kernel},
		{filepath.Join(rc.Inputs[TypeLiveInitrd], InitrdFile), names.Initramfs},
		{filepath.Join(rc.Inputs[TypeLiveRootfs], RootfsImgFile), names.Rootfs},
	}
	for _, l := range links {
		if err := linkOrCopy(l.src, filepath.Join(rc.OutDir, l.dst)); err != nil {
			return fmt.Errorf("gathering %s: %w", l.dst, err)
		}
	}
	rc.Progress.Message("hashing artifacts")
	st, err := stream.NewLiveStream(stream.LiveBuild{
		Dir: rc.OutDir, Prefix: s.Opts.Prefix, Release: s.Opts.Release, Arch: s.Opts.Arch,
		StreamName: s.Opts.StreamName, GeneratorVersion: s.Opts.GeneratorVersion,
		BaseURL: s.Opts.BaseURL, SourceDateEpoch: s.Opts.SourceDateEpoch,
	})
	if err != nil {
		return err
	}
	return st.WriteFile(filepath.Join(rc.OutDir, stream.FileName(s.Opts.Prefix)))
}
