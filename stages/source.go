package stages

import (
	"context"
	"errors"
	"fmt"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/payload"
	"github.com/okd-project/scos-builder/internal/registry"
)

// ResolvedFile is the payload.resolve output.
const ResolvedFile = "resolved.json"

// PayloadResolveOptions are the outcome of the resolve phase: the network
// look-ups happen before planning (so the plan is a pure function of what
// they found), and this stage records them for the later stages and for
// the user.
type PayloadResolveOptions struct {
	// Payload is the release image as given (empty for --image builds).
	Payload string `json:"payload,omitempty"`
	// Resolved is what the payload says about its OS image.
	Resolved *payload.Resolved `json:"resolved,omitempty"`
	// OSImage is the OS image reference to fetch.
	OSImage string `json:"os-image"`
	// Recipe is the recipe in use.
	Recipe string `json:"recipe"`
}

// Validate implements builder.Options.
func (o PayloadResolveOptions) Validate() error {
	if o.OSImage == "" {
		return errors.New("no OS image")
	}
	if o.Recipe == "" {
		return errors.New("no recipe")
	}
	return nil
}

// PayloadResolve records the resolve phase's result.
type PayloadResolve struct{ Opts PayloadResolveOptions }

func (s *PayloadResolve) Type() string             { return TypePayloadResolve }
func (s *PayloadResolve) Version() int             { return 1 }
func (s *PayloadResolve) Options() builder.Options { return s.Opts }
func (s *PayloadResolve) Inputs() []string         { return nil }
func (s *PayloadResolve) Tools() []string          { return nil }

func (s *PayloadResolve) Run(ctx context.Context, rc *builder.RunContext) error {
	if s.Opts.Resolved != nil {
		rc.Progress.Message("release %s: OS image %s (tag %s, found by %s), recipe %s",
			s.Opts.Resolved.Version, s.Opts.OSImage, s.Opts.Resolved.OSTag, s.Opts.Resolved.FoundBy, s.Opts.Recipe)
	}
	return writeJSON(rc.OutDir, ResolvedFile, s.Opts)
}

// FetchedFile is the image.fetch output: the registry.FetchedImage.
const FetchedFile = "fetched.json"

// ImageFetchOptions name exactly one image: a reference and the digest of
// its per-architecture manifest. The fetch deliberately does not depend on
// payload.resolve: a new payload that carries the same OS image reuses
// every stage from here on.
type ImageFetchOptions struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	Arch   string `json:"arch"`
}

// Validate implements builder.Options.
func (o ImageFetchOptions) Validate() error {
	if o.Ref == "" || o.Digest == "" {
		return errors.New("image reference and digest are required")
	}
	if _, err := registry.ParsePlatform(o.Arch); err != nil {
		return err
	}
	return nil
}

// ImageFetch copies the OS image's blobs into the blob cache.
type ImageFetch struct {
	Opts   ImageFetchOptions
	Client *registry.Client
}

func (s *ImageFetch) Type() string             { return TypeImageFetch }
func (s *ImageFetch) Version() int             { return 1 }
func (s *ImageFetch) Options() builder.Options { return s.Opts }
func (s *ImageFetch) Inputs() []string         { return nil }
func (s *ImageFetch) Tools() []string          { return nil }

func (s *ImageFetch) Run(ctx context.Context, rc *builder.RunContext) error {
	img, err := s.Client.Fetch(ctx, s.Opts.Ref, rc.Progress)
	if err != nil {
		return err
	}
	if string(img.InstanceDigest) != s.Opts.Digest {
		return fmt.Errorf("fetching %s: got manifest %s, but the plan was made for %s; the image changed while building, run again",
			s.Opts.Ref, img.InstanceDigest, s.Opts.Digest)
	}
	fmt.Fprintf(rc.Log, "fetched %s (%s), %d layers\n", img.Ref, img.InstanceDigest, len(img.Layers))
	return writeJSON(rc.OutDir, FetchedFile, img)
}

// ReadFetched reads the image.fetch output in dir.
func ReadFetched(dir string) (*registry.FetchedImage, error) {
	var img registry.FetchedImage
	if err := readJSON(dir, FetchedFile, &img); err != nil {
		return nil, err
	}
	return &img, nil
}
