package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/manifest"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"

	"github.com/okd-project/scos-builder/internal/registry"
)

// RegistryOptions say how to reach registries.
type RegistryOptions struct {
	// Source holds the settings pulls use too (auth files, TLS
	// verification, certs.d, registries.conf, signature policy), so a push
	// behaves as the pulls of the same command line.
	Source registry.Options
	// ReportWriter receives copy progress (bars on a terminal); nil discards it.
	ReportWriter io.Writer
}

func (o RegistryOptions) reportWriter() io.Writer {
	if o.ReportWriter == nil {
		return io.Discard
	}
	return o.ReportWriter
}

// parseRegistryRef accepts "host/repo:tag" or "docker://host/repo:tag".
func parseRegistryRef(ref string) (types.ImageReference, error) {
	r, err := docker.ParseReference("//" + strings.TrimPrefix(ref, "docker://"))
	if err != nil {
		return nil, fmt.Errorf("parsing image reference %q (want host/repository:tag): %w", ref, err)
	}
	return r, nil
}

// Push copies the index (and every manifest and blob under it) tagged tag
// in the OCI layout layoutDir to the registry reference dest, digests
// unchanged, and returns the pushed index digest. It is the only place
// this package writes to a registry.
func Push(ctx context.Context, layoutDir, tag, dest string, o RegistryOptions) (digest.Digest, error) {
	destRef, err := parseRegistryRef(dest)
	if err != nil {
		return "", fmt.Errorf("pushing: %w", err)
	}
	srcRef, err := ocilayout.NewReference(layoutDir, tag)
	if err != nil {
		return "", fmt.Errorf("pushing %s: opening OCI layout %s: %w", dest, layoutDir, err)
	}
	// The source is the layout this program just wrote: no signature policy
	// applies to it.
	policy, err := signature.NewPolicyContext(&signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", dest, err)
	}
	defer policy.Destroy()
	sys, err := o.Source.SystemContext()
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", dest, err)
	}
	manifestBytes, err := copy.Image(ctx, policy, destRef, srcRef, &copy.Options{
		ReportWriter:       o.reportWriter(),
		DestinationCtx:     sys,
		ImageListSelection: copy.CopyAllImages,
		PreserveDigests:    true,
	})
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w%s", dest, err, authHint(err))
	}
	d, err := manifest.Digest(manifestBytes)
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", dest, err)
	}
	return d, nil
}

// pullPlatform copies the linux/<goarch> image of ref (selected from a
// manifest list if there is one) into layoutDir as tag, converted to
// manifestType, checking signatures per the signature policy of the source
// options (as every pull does).
func pullPlatform(ctx context.Context, ref, goarch, manifestType, layoutDir, tag string, o RegistryOptions) error {
	srcRef, err := parseRegistryRef(ref)
	if err != nil {
		return fmt.Errorf("pulling base image: %w", err)
	}
	destRef, err := ocilayout.NewReference(layoutDir, tag)
	if err != nil {
		return fmt.Errorf("pulling base image %s: %w", ref, err)
	}
	sys, err := o.Source.SystemContext()
	if err != nil {
		return fmt.Errorf("pulling base image %s: %w", ref, err)
	}
	sys.ArchitectureChoice, sys.OSChoice, sys.VariantChoice = goarch, "linux", ""
	policy, _, err := o.Source.PolicyContext()
	if err != nil {
		return fmt.Errorf("pulling base image %s: %w", ref, err)
	}
	defer policy.Destroy()
	_, err = copy.Image(ctx, policy, destRef, srcRef, &copy.Options{
		ReportWriter:          o.reportWriter(),
		SourceCtx:             sys,
		ForceManifestMIMEType: manifestType,
	})
	if err != nil {
		return fmt.Errorf("pulling base image %s for linux/%s: %w%s", ref, goarch, err, authHint(err))
	}
	return nil
}

// authHint adds how to fix an authentication failure.
func authHint(err error) string {
	var unauth docker.ErrUnauthorizedForCredentials
	msg := strings.ToLower(err.Error())
	if errors.As(err, &unauth) || strings.Contains(msg, "unauthorized") || strings.Contains(msg, "authentication required") || strings.Contains(msg, "denied") {
		return " (authentication failed: log in with `podman login`/`skopeo login` to this registry, or pass --authfile FILE holding credentials for it)"
	}
	return ""
}
