package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/transports"
	"go.podman.io/image/v5/transports/alltransports"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage/pkg/configfile"
)

// ParseReference parses an image reference in any c/image transport
// (docker://, oci:, oci-archive:, docker-archive:, dir:,
// containers-storage:); a reference without a known transport prefix, such
// as "quay.io/okd/scos-release:4.19", means docker://.
func ParseReference(ref string) (types.ImageReference, error) {
	if ref == "" {
		return nil, errors.New("parsing image reference: empty reference")
	}
	if t, _, ok := strings.Cut(ref, ":"); ok && transports.Get(t) != nil {
		r, err := alltransports.ParseImageName(ref)
		if err != nil {
			return nil, fmt.Errorf("parsing image reference %q: %w", ref, err)
		}
		return r, nil
	}
	r, err := docker.ParseReference("//" + ref)
	if err != nil {
		return nil, fmt.Errorf("parsing image reference %q (no transport prefix, so read as docker://; valid transports: %s): %w",
			ref, strings.Join(knownTransports(), ", "), err)
	}
	return r, nil
}

func knownTransports() []string {
	names := transports.ListNames()
	sort.Strings(names)
	return names
}

// refString is the transport-qualified form of ref, as users type it.
func refString(ref types.ImageReference) string {
	return ref.Transport().Name() + ":" + ref.StringWithinTransport()
}

// registryHost is the registry host[:port] of a docker reference, or "".
func registryHost(ref types.ImageReference) string {
	if ref.Transport().Name() != docker.Transport.Name() || ref.DockerReference() == nil {
		return ""
	}
	return reference.Domain(ref.DockerReference())
}

// Client reads images with one set of Options and keeps fetched blobs in a
// cache directory (an OCI image layout).
type Client struct {
	opts     Options
	sys      *types.SystemContext
	policy   *signature.PolicyContext
	policyBy string
	cache    *blobCache
}

// New checks the options, loads the signature policy and opens (creating
// it when missing) the blob cache in cacheDir.
func New(opts Options, cacheDir string) (*Client, error) {
	sys, err := opts.SystemContext()
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, sys: sys}
	if c.opts.Parallel <= 0 {
		c.opts.Parallel = 4
	}
	if err := c.loadPolicy(); err != nil {
		return nil, err
	}
	if cacheDir == "" {
		return nil, errors.New("opening blob cache: no cache directory given")
	}
	if c.cache, err = openBlobCache(cacheDir); err != nil {
		return nil, err
	}
	return c, nil
}

// Close releases the signature policy.
func (c *Client) Close() error {
	if c.policy != nil {
		return c.policy.Destroy()
	}
	return nil
}

// CacheDir is the OCI layout the client fetches into.
func (c *Client) CacheDir() string { return c.cache.dir }

func (c *Client) loadPolicy() error {
	var err error
	c.policy, c.policyBy, err = c.opts.PolicyContext()
	return err
}

// PolicyContext loads the signature policy: --signature-policy, else the
// system policy.json, else (none installed) accept anything, which is said
// at debug level. It also returns where the policy came from.
func (o *Options) PolicyContext() (*signature.PolicyContext, string, error) {
	var (
		p   *signature.Policy
		by  string
		err error
	)
	if o.SignaturePolicy != "" {
		p, err = signature.NewPolicyFromFile(o.SignaturePolicy)
		if err != nil {
			return nil, "", fmt.Errorf("reading signature policy %s: %w", o.SignaturePolicy, err)
		}
		by = o.SignaturePolicy
	} else {
		p, err = signature.DefaultPolicy(&types.SystemContext{RootForImplicitAbsolutePaths: o.systemRoot})
		switch {
		case errors.Is(err, configfile.ErrConfigFileNotFound):
			o.debugf("no policy.json found (%v): accepting any image", err)
			p = &signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}}
			by = "built-in accept-anything policy"
		case err != nil:
			return nil, "", fmt.Errorf("reading signature policy: %w", err)
		default:
			by = "system policy.json"
		}
	}
	pc, err := signature.NewPolicyContext(p)
	if err != nil {
		return nil, "", fmt.Errorf("loading signature policy: %w", err)
	}
	return pc, by, nil
}

// wantPlatform is the platform selected from manifest lists.
func (c *Client) wantPlatform() platform {
	if c.opts.Arch != "" {
		if p, err := parsePlatform(c.opts.Arch); err == nil {
			return p
		}
	}
	return platform{OS: "linux", Arch: runtime.GOARCH}
}

// isTransient reports whether a registry error is worth retrying.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, docker.ErrTooManyRequests) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var status docker.UnexpectedHTTPStatusError
	if errors.As(err, &status) && status.StatusCode >= 500 {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsTemporary {
		return true
	}
	return false
}

// retry runs fn until it succeeds, fails permanently or the retries are used.
func (c *Client) retry(ctx context.Context, what string, fn func() error) error {
	delay := c.opts.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt >= c.opts.Retries || !isTransient(err) {
			return err
		}
		c.opts.debugf("%s: %v: retrying in %s (attempt %d of %d)", what, err, delay, attempt+2, c.opts.Retries+1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// explain adds what the user needs to fix an error: for authentication
// failures, the credentials file used; for a docker reference, the host.
func (c *Client) explain(err error, ref types.ImageReference) error {
	host := registryHost(ref)
	if host == "" {
		return err
	}
	var unauth docker.ErrUnauthorizedForCredentials
	msg := err.Error()
	if errors.As(err, &unauth) || strings.Contains(msg, "unauthorized") || strings.Contains(msg, "authentication required") {
		if file, ok := c.authFileFor(host); ok {
			return fmt.Errorf("%w (credentials for %s were read from %s; check them or pass --authfile)", err, host, file)
		}
		return fmt.Errorf("%w (no credentials for %s in %s; pass --authfile)", err, host, strings.Join(c.opts.authFileCandidates(), ", "))
	}
	if !strings.Contains(msg, host) {
		return fmt.Errorf("registry %s: %w", host, err)
	}
	return err
}

// authFileFor names the first credentials file with an entry for host.
func (c *Client) authFileFor(host string) (string, bool) {
	cands := c.opts.authFileCandidates()
	if c.sys.AuthFilePath != "" {
		cands = []string{c.sys.AuthFilePath}
	}
	for _, f := range cands {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var doc struct {
			Auths       map[string]json.RawMessage `json:"auths"`
			CredHelpers map[string]string          `json:"credHelpers"`
		}
		if json.Unmarshal(b, &doc) != nil {
			continue
		}
		if doc.Auths == nil {
			// Legacy ~/.dockercfg: the entries are at the top level.
			_ = json.Unmarshal(b, &doc.Auths)
		}
		for k := range doc.Auths {
			k = strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
			if k == host || strings.HasPrefix(k, host+"/") {
				return f, true
			}
		}
		if _, ok := doc.CredHelpers[host]; ok {
			return f, true
		}
	}
	return "", false
}

// opened is an image source positioned on one (per-arch) image.
type opened struct {
	ref          types.ImageReference
	src          types.ImageSource
	topDigest    digest.Digest  // digest of the manifest ref points at (list or image)
	instance     *digest.Digest // selected instance of a manifest list, or nil
	manifest     []byte
	manifestMIME string
	platform     string // selected list platform, or ""
}

func (o *opened) Close() error { return o.src.Close() }

// open opens ref, checks the signature policy and selects the image for
// the requested architecture when ref is a manifest list.
func (c *Client) open(ctx context.Context, refStr string) (*opened, error) {
	ref, err := ParseReference(refStr)
	if err != nil {
		return nil, err
	}
	var src types.ImageSource
	err = c.retry(ctx, "opening "+refString(ref), func() error {
		var e error
		src, e = ref.NewImageSource(ctx, c.sys)
		return e
	})
	if err != nil {
		return nil, fmt.Errorf("opening image %s: %w", refString(ref), c.explain(err, ref))
	}
	o := &opened{ref: ref, src: src}
	ok := false
	defer func() {
		if !ok {
			src.Close()
		}
	}()
	top, topMIME, err := c.getManifest(ctx, o, nil)
	if err != nil {
		return nil, err
	}
	if o.topDigest, err = manifest.Digest(top); err != nil {
		return nil, fmt.Errorf("hashing manifest of %s: %w", refString(ref), err)
	}
	if d, isDigest := refDigest(ref); isDigest {
		if match, _ := manifest.MatchesDigest(top, d); !match {
			return nil, fmt.Errorf("reading manifest of %s: content does not match digest %s", refString(ref), d)
		}
	}
	allowed, err := c.policy.IsRunningImageAllowed(ctx, image.UnparsedInstance(src, nil))
	if err != nil {
		return nil, fmt.Errorf("checking signature policy (%s) for %s: image rejected: %w", c.policyBy, refString(ref), err)
	}
	if !allowed {
		return nil, fmt.Errorf("checking signature policy (%s) for %s: image rejected", c.policyBy, refString(ref))
	}
	o.manifest, o.manifestMIME = top, topMIME
	if manifest.MIMETypeIsMultiImage(topMIME) {
		list, err := manifest.ListFromBlob(top, topMIME)
		if err != nil {
			return nil, fmt.Errorf("parsing manifest list of %s: %w", refString(ref), err)
		}
		want := c.wantPlatform()
		sys := *c.sys
		sys.OSChoice, sys.ArchitectureChoice, sys.VariantChoice = want.OS, want.Arch, want.Variant
		d, err := list.ChooseInstance(&sys)
		if err != nil {
			return nil, fmt.Errorf("choosing %s from manifest list %s: no image for that platform (platforms present: %s)",
				want, refString(ref), strings.Join(listPlatforms(list), ", "))
		}
		m, mime, err := c.getManifest(ctx, o, &d)
		if err != nil {
			return nil, err
		}
		if match, _ := manifest.MatchesDigest(m, d); !match {
			return nil, fmt.Errorf("reading manifest %s of %s: content does not match its digest", d, refString(ref))
		}
		if manifest.MIMETypeIsMultiImage(mime) {
			return nil, fmt.Errorf("reading manifest %s of %s: nested manifest lists are not supported", d, refString(ref))
		}
		o.instance, o.manifest, o.manifestMIME, o.platform = &d, m, mime, want.String()
	}
	ok = true
	return o, nil
}

func (c *Client) getManifest(ctx context.Context, o *opened, instance *digest.Digest) ([]byte, string, error) {
	var (
		b    []byte
		mime string
	)
	err := c.retry(ctx, "reading manifest of "+refString(o.ref), func() error {
		var e error
		b, mime, e = o.src.GetManifest(ctx, instance)
		return e
	})
	if err != nil {
		return nil, "", fmt.Errorf("reading manifest of %s: %w", refString(o.ref), c.explain(err, o.ref))
	}
	if mime == "" {
		mime = manifest.GuessMIMEType(b)
	}
	return b, manifest.NormalizedMIMEType(mime), nil
}

func refDigest(ref types.ImageReference) (digest.Digest, bool) {
	if ref.Transport().Name() != docker.Transport.Name() || ref.DockerReference() == nil {
		return "", false
	}
	if c, ok := ref.DockerReference().(reference.Canonical); ok {
		return c.Digest(), true
	}
	return "", false
}

func listPlatforms(list manifest.List) []string {
	var out []string
	for _, d := range list.Instances() {
		u, err := list.Instance(d)
		if err != nil || u.ReadOnly.Platform == nil {
			continue
		}
		p := platform{u.ReadOnly.Platform.OS, u.ReadOnly.Platform.Architecture, u.ReadOnly.Platform.Variant}
		out = append(out, p.String())
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// parsedImage is the per-arch image: its manifest, config and layers as
// they are stored in the cache.
type parsedImage struct {
	manifest     []byte
	manifestMIME string
	configDesc   types.BlobInfo
	configBlob   []byte
	config       imgspecv1.Image
	layers       []types.BlobInfo
}

// parse reads the config and layer list of an opened image, storing the
// config blob in the cache. Layers are those c/image would copy (for
// containers-storage: the uncompressed diffs), and the manifest is updated
// to name them.
func (c *Client) parse(ctx context.Context, o *opened) (*parsedImage, error) {
	if o.manifestMIME == manifest.DockerV2Schema1MediaType || o.manifestMIME == manifest.DockerV2Schema1SignedMediaType {
		return nil, fmt.Errorf("reading %s: docker schema 1 manifests are not supported (convert with skopeo copy --format oci)", refString(o.ref))
	}
	m, err := manifest.FromBlob(o.manifest, o.manifestMIME)
	if err != nil {
		return nil, fmt.Errorf("parsing manifest of %s: %w", refString(o.ref), err)
	}
	p := &parsedImage{manifest: o.manifest, manifestMIME: o.manifestMIME, configDesc: m.ConfigInfo()}
	for _, l := range m.LayerInfos() {
		p.layers = append(p.layers, l.BlobInfo)
	}
	forCopy, err := o.src.LayerInfosForCopy(ctx, o.instance)
	if err != nil {
		return nil, fmt.Errorf("reading layer list of %s: %w", refString(o.ref), err)
	}
	if forCopy != nil {
		if err := m.UpdateLayerInfos(forCopy); err != nil {
			return nil, fmt.Errorf("updating layer list of %s: %w", refString(o.ref), err)
		}
		if p.manifest, err = m.Serialize(); err != nil {
			return nil, fmt.Errorf("updating manifest of %s: %w", refString(o.ref), err)
		}
		p.layers = forCopy
	}
	path, err := c.fetchBlob(ctx, o, p.configDesc, "config", nil)
	if err != nil {
		return nil, err
	}
	if p.configBlob, err = os.ReadFile(path); err != nil {
		return nil, fmt.Errorf("reading config of %s: %w", refString(o.ref), err)
	}
	if err := json.Unmarshal(p.configBlob, &p.config); err != nil {
		return nil, fmt.Errorf("parsing config %s of %s: %w", p.configDesc.Digest, refString(o.ref), err)
	}
	return p, nil
}

// getBlob opens one blob of an opened image with retries.
func (c *Client) getBlob(ctx context.Context, o *opened, info types.BlobInfo) (io.ReadCloser, int64, error) {
	var (
		rc   io.ReadCloser
		size int64
	)
	err := c.retry(ctx, "reading blob "+info.Digest.String(), func() error {
		var e error
		rc, size, e = o.src.GetBlob(ctx, info, none.NoCache)
		return e
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading blob %s of %s: %w", info.Digest, refString(o.ref), c.explain(err, o.ref))
	}
	return rc, size, nil
}
