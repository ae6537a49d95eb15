package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/pkg/compression"
	"golang.org/x/sync/errgroup"
)

// Reporter receives progress; it has the shape of builder.StageReporter so
// the engine's reporter plugs in directly.
type Reporter interface {
	// Progress reports done out of total bytes for the transfer named by
	// msg (total 0 means unknown).
	Progress(msg string, done, total int64)
	// Message reports one line of status.
	Message(format string, args ...any)
}

// ImageInfo describes one (per-architecture) image without its layers.
type ImageInfo struct {
	// Ref is the reference as given, transport-qualified.
	Ref string
	// Digest is the digest of the manifest Ref points at (a manifest list
	// for multi-arch images).
	Digest digest.Digest
	// DigestRef is the docker pull spec by digest (repo@Digest); empty for
	// other transports.
	DigestRef string
	// InstanceDigest is the per-arch manifest's digest (equal to Digest
	// when Ref is not a list).
	InstanceDigest digest.Digest
	// Platform is the platform selected from a manifest list, or "".
	Platform string
	// Labels are the image config labels.
	Labels map[string]string
	// Created is the image creation time from the config (zero if unset).
	Created time.Time
	// Config is the full image config.
	Config imgspecv1.Image
}

// Layer is one layer blob of a fetched image, in manifest order.
type Layer struct {
	Digest    digest.Digest
	DiffID    digest.Digest
	Size      int64
	MediaType string
	// Path is the blob file in the cache (compressed as in MediaType).
	Path string
}

// FetchedImage is an image whose blobs are all in the cache.
type FetchedImage struct {
	ImageInfo
	// CacheDir is the OCI layout holding the blobs.
	CacheDir string
	// Manifest is the per-arch manifest as stored in the cache, and
	// ManifestDigest its digest (differs from InstanceDigest only for
	// containers-storage:, whose layers are stored uncompressed).
	Manifest          []byte
	ManifestMediaType string
	ManifestDigest    digest.Digest
	ConfigDigest      digest.Digest
	// Layers are in application order (base first).
	Layers []Layer
}

// Fetch copies ref (any transport) into the blob cache in cacheDir and
// returns where its manifest, config and layers are. See Client.Fetch.
func Fetch(ctx context.Context, ref, cacheDir string, opts Options, rep Reporter) (*FetchedImage, error) {
	c, err := New(opts, cacheDir)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Fetch(ctx, ref, rep)
}

// Inspect reads the manifest and config of ref (selecting the requested
// architecture from a manifest list) without fetching layers.
func (c *Client) Inspect(ctx context.Context, ref string) (*ImageInfo, error) {
	o, err := c.open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	p, err := c.parse(ctx, o)
	if err != nil {
		return nil, err
	}
	return c.info(o, p), nil
}

func (c *Client) info(o *opened, p *parsedImage) *ImageInfo {
	info := &ImageInfo{
		Ref:            refString(o.ref),
		Digest:         o.topDigest,
		InstanceDigest: o.topDigest,
		Platform:       o.platform,
		Labels:         p.config.Config.Labels,
		Config:         p.config,
	}
	if o.instance != nil {
		info.InstanceDigest = *o.instance
	}
	if p.config.Created != nil {
		info.Created = p.config.Created.UTC()
	}
	if named := o.ref.DockerReference(); named != nil && registryHost(o.ref) != "" {
		if can, err := reference.WithDigest(reference.TrimNamed(named), o.topDigest); err == nil {
			info.DigestRef = can.String()
		}
	}
	return info
}

// Fetch copies ref into the cache: manifest, config and all layers (in
// parallel, each verified against its digest). Blobs already in the
// cache are reused; a docker reference by digest that was fetched before
// for the same platform is served from the cache without any network
// access.
func (c *Client) Fetch(ctx context.Context, ref string, rep Reporter) (*FetchedImage, error) {
	if img, ok := c.cached(ref); ok {
		if rep != nil {
			rep.Message("Using cached image %s (%s)", img.Ref, img.ManifestDigest)
		}
		return img, nil
	}
	o, err := c.open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	p, err := c.parse(ctx, o)
	if err != nil {
		return nil, err
	}
	if len(p.config.RootFS.DiffIDs) != len(p.layers) {
		return nil, fmt.Errorf("reading %s: config lists %d diff IDs for %d layers", refString(o.ref), len(p.config.RootFS.DiffIDs), len(p.layers))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Parallel)
	for _, l := range p.layers {
		g.Go(func() error {
			_, err := c.fetchBlob(gctx, o, l, "blob", rep)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	mdigest, err := manifest.Digest(p.manifest)
	if err != nil {
		return nil, err
	}
	if err := c.cache.write(mdigest, int64(len(p.manifest)), bytes.NewReader(p.manifest), nil); err != nil {
		return nil, fmt.Errorf("storing manifest of %s: %w", refString(o.ref), err)
	}
	if rep != nil {
		rep.Message("Writing manifest to image destination")
	}
	desc := imgspecv1.Descriptor{
		MediaType: p.manifestMIME,
		Digest:    mdigest,
		Size:      int64(len(p.manifest)),
		Annotations: map[string]string{
			annotationSource:       refString(o.ref),
			annotationSourceDigest: o.topDigest.String(),
			annotationPlatform:     o.platform,
		},
	}
	if err := c.cache.record(desc); err != nil {
		return nil, fmt.Errorf("recording %s in blob cache: %w", refString(o.ref), err)
	}
	return c.fetched(c.info(o, p), p, mdigest)
}

func (c *Client) fetched(info *ImageInfo, p *parsedImage, mdigest digest.Digest) (*FetchedImage, error) {
	img := &FetchedImage{
		ImageInfo:         *info,
		CacheDir:          c.cache.dir,
		Manifest:          p.manifest,
		ManifestMediaType: p.manifestMIME,
		ManifestDigest:    mdigest,
		ConfigDigest:      p.configDesc.Digest,
	}
	for i, l := range p.layers {
		img.Layers = append(img.Layers, Layer{
			Digest:    l.Digest,
			DiffID:    p.config.RootFS.DiffIDs[i],
			Size:      l.Size,
			MediaType: l.MediaType,
			Path:      c.cache.blobPath(l.Digest),
		})
	}
	return img, nil
}

// cached serves a docker reference by digest from the cache when it was
// fetched before for the same platform and all its blobs are present.
func (c *Client) cached(refStr string) (*FetchedImage, bool) {
	ref, err := ParseReference(refStr)
	if err != nil {
		return nil, false
	}
	top, ok := refDigest(ref)
	if !ok {
		return nil, false
	}
	// The platform is recorded only when the ref was a manifest list; try
	// both keys.
	var desc imgspecv1.Descriptor
	found := false
	for _, plat := range []string{c.wantPlatform().String(), ""} {
		if desc, found = c.cache.lookup(refString(ref), top, plat); found {
			break
		}
	}
	if !found || !c.cache.has(desc.Digest, desc.Size) {
		return nil, false
	}
	mb, err := os.ReadFile(c.cache.blobPath(desc.Digest))
	if err != nil {
		return nil, false
	}
	m, err := manifest.FromBlob(mb, desc.MediaType)
	if err != nil {
		return nil, false
	}
	p := &parsedImage{manifest: mb, manifestMIME: desc.MediaType, configDesc: m.ConfigInfo()}
	for _, l := range m.LayerInfos() {
		if !c.cache.has(l.Digest, l.Size) {
			return nil, false
		}
		p.layers = append(p.layers, l.BlobInfo)
	}
	if p.configBlob, err = os.ReadFile(c.cache.blobPath(p.configDesc.Digest)); err != nil {
		return nil, false
	}
	if json.Unmarshal(p.configBlob, &p.config) != nil || len(p.config.RootFS.DiffIDs) != len(p.layers) {
		return nil, false
	}
	o := &opened{ref: ref, topDigest: top, platform: desc.Annotations[annotationPlatform]}
	if o.platform != "" {
		o.instance = &desc.Digest
	}
	img, err := c.fetched(c.info(o, p), p, desc.Digest)
	if err != nil {
		return nil, false
	}
	return img, true
}

// OpenLayer fetches layer index of ref into the cache (a negative index
// counts from the end: -1 is the last layer) and returns it decompressed,
// with the image's description.
func (c *Client) OpenLayer(ctx context.Context, ref string, index int) (io.ReadCloser, *ImageInfo, error) {
	o, err := c.open(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	defer o.Close()
	p, err := c.parse(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	i := index
	if i < 0 {
		i += len(p.layers)
	}
	if i < 0 || i >= len(p.layers) {
		return nil, nil, fmt.Errorf("reading layer %d of %s: the image has %d layers", index, refString(o.ref), len(p.layers))
	}
	path, err := c.fetchBlob(ctx, o, p.layers[i], "blob", nil)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	r, _, err := compression.AutoDecompress(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("decompressing layer %s of %s: %w", p.layers[i].Digest, refString(o.ref), err)
	}
	return &layerReader{ReadCloser: r, f: f}, c.info(o, p), nil
}

type layerReader struct {
	io.ReadCloser
	f *os.File
}

func (l *layerReader) Close() error {
	err := l.ReadCloser.Close()
	if e := l.f.Close(); err == nil {
		err = e
	}
	return err
}

// LastLayer returns the last layer of ref decompressed, and ref's pull
// spec by digest ("" for non-registry transports). It is what
// payload.Source needs to read a release image.
func (c *Client) LastLayer(ctx context.Context, ref string) (io.ReadCloser, string, error) {
	rc, info, err := c.OpenLayer(ctx, ref, -1)
	if err != nil {
		return nil, "", err
	}
	return rc, info.DigestRef, nil
}

// Labels returns the config labels of ref and its pull spec by digest.
func (c *Client) Labels(ctx context.Context, ref string) (map[string]string, string, error) {
	info, err := c.Inspect(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	return info.Labels, info.DigestRef, nil
}

// Open returns the layer's uncompressed tar stream. Reading it to the end
// checks the content against DiffID: a mismatch is returned as the error
// of the final Read instead of io.EOF.
func (l *Layer) Open() (io.ReadCloser, error) {
	f, err := os.Open(l.Path)
	if err != nil {
		return nil, fmt.Errorf("opening layer %s: %w", l.Digest, err)
	}
	r, _, err := compression.AutoDecompress(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("decompressing layer %s: %w", l.Digest, err)
	}
	lr := &layerReader{ReadCloser: r, f: f}
	if l.DiffID == "" || l.DiffID.Validate() != nil {
		return lr, nil
	}
	return &diffIDReader{layerReader: lr, layer: l, v: l.DiffID.Verifier()}, nil
}

type diffIDReader struct {
	*layerReader
	layer *Layer
	v     digest.Verifier
}

func (d *diffIDReader) Read(p []byte) (int, error) {
	n, err := d.layerReader.Read(p)
	d.v.Write(p[:n])
	if err == io.EOF && !d.v.Verified() {
		return n, fmt.Errorf("layer %s: uncompressed content does not match diff ID %s", d.layer.Digest, d.layer.DiffID)
	}
	return n, err
}
