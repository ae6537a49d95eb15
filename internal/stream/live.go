package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LiveBuild describes one architecture's live artifacts on disk, named by
// LiveArtifactNames(Prefix, Release, Arch) inside Dir.
type LiveBuild struct {
	// Dir holds the artifact files.
	Dir string
	// Prefix is the recipe's artifact prefix, e.g. "scos".
	Prefix string
	// Release is the OS image's build id (label org.opencontainers.image.version,
	// else the payload's machine-os version).
	Release string
	// Arch is the RPM architecture, e.g. x86_64.
	Arch string
	// StreamName is the stream's name, e.g. "c10s".
	StreamName string
	// GeneratorVersion is scos-builder's version; the generator field
	// becomes "scos-builder <version>".
	GeneratorVersion string
	// BaseURL, when set, is prepended to the file names in locations
	// ("https://host/dir/" + name); otherwise locations are bare file names
	// relative to the stream file.
	BaseURL string
	// SourceDateEpoch is the last-modified time (seconds since the epoch).
	SourceDateEpoch int64
}

// Generator is the metadata.generator value for a scos-builder version.
func Generator(version string) string { return "scos-builder " + version }

// NewLiveStream builds a one-architecture stream whose metal platform lists
// formats.iso.disk and formats.pxe.{kernel,initramfs,rootfs}, with the
// sha256 of each file's exact bytes.
func NewLiveStream(b LiveBuild) (*Stream, error) {
	names, err := LiveArtifactNames(b.Prefix, b.Release, b.Arch)
	if err != nil {
		return nil, fmt.Errorf("building stream: %w", err)
	}
	if b.StreamName == "" {
		return nil, errors.New("building stream: stream name is empty")
	}
	if b.GeneratorVersion == "" {
		return nil, errors.New("building stream: generator version is empty")
	}
	if b.SourceDateEpoch < 0 {
		return nil, fmt.Errorf("building stream: SOURCE_DATE_EPOCH %d is negative", b.SourceDateEpoch)
	}
	base, err := NormalizeBaseURL(b.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("building stream: %w", err)
	}
	artifact := func(name string) (*Artifact, error) {
		sum, err := FileSHA256(filepath.Join(b.Dir, name))
		if err != nil {
			return nil, fmt.Errorf("building stream: %w", err)
		}
		return &Artifact{Location: base + name, Sha256: sum}, nil
	}
	var pxe ImageFormat
	iso, err := artifact(names.ISO)
	if err != nil {
		return nil, err
	}
	if pxe.Kernel, err = artifact(names.Kernel); err != nil {
		return nil, err
	}
	if pxe.Initramfs, err = artifact(names.Initramfs); err != nil {
		return nil, err
	}
	if pxe.Rootfs, err = artifact(names.Rootfs); err != nil {
		return nil, err
	}
	return &Stream{
		Stream: b.StreamName,
		Metadata: Metadata{
			LastModified: time.Unix(b.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
			Generator:    Generator(b.GeneratorVersion),
		},
		Architectures: map[string]Arch{
			b.Arch: {Artifacts: map[string]PlatformArtifacts{
				"metal": {
					Release: b.Release,
					Formats: map[string]ImageFormat{
						"iso": {Disk: iso},
						"pxe": pxe,
					},
				},
			}},
		},
	}, nil
}

// FileSHA256 returns the hex sha256 of a file's bytes.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hashing artifact: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing artifact %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// NormalizeBaseURL returns "" or an absolute URL ending in "/".
func NormalizeBaseURL(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("parsing base URL: %w", err)
	}
	if u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("base URL %q is not absolute (want e.g. https://host/path/)", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("base URL %q has a query or fragment", s)
	}
	if !strings.HasSuffix(s, "/") {
		s += "/"
	}
	return s, nil
}

// LabelVersion is the OS image label holding its build id.
const LabelVersion = "org.opencontainers.image.version"

// ReleaseFor picks the stream release of a build: the OS image's
// org.opencontainers.image.version label, else the payload's machine-os
// version (io.openshift.build.versions machine-os=…).
func ReleaseFor(imageLabels map[string]string, machineOSVersion string) (string, error) {
	r := imageLabels[LabelVersion]
	if r == "" {
		r = machineOSVersion
	}
	if r == "" {
		return "", fmt.Errorf("the OS image has no %s label and no machine-os version is known (pass --release)", LabelVersion)
	}
	if err := checkNamePart("release", r); err != nil {
		return "", err
	}
	return r, nil
}
