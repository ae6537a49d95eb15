// Package registry is a thin layer over go.podman.io/image/v5 for reading
// container images: it parses references in every transport (a bare
// "quay.io/…" means docker://), builds the SystemContext from the usual
// podman/skopeo settings (auth files, registries.conf mirrors, policy.json,
// TLS verification and certs.d), picks the image for one architecture from a
// manifest list, retries transient registry errors, and fetches images into
// a blob cache that is an OCI image layout.
//
// Contract: every blob written to the cache was hashed while it was written
// and renamed into place only when its digest matched, so a blob present in
// the cache is trusted and never fetched again. Nothing in this package
// writes outside the cache directory it is given.
package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.podman.io/image/v5/types"
)

// Options are the image-source settings shared by every command that reads
// an image (the CLI flags --authfile, --tls-verify, --cert-dir,
// --signature-policy, --registries-conf and --arch).
type Options struct {
	// AuthFile is the credentials file (containers auth.json, Docker
	// config.json or an OpenShift pull secret: all share the "auths" format).
	// Empty means the standard lookup: $REGISTRY_AUTH_FILE,
	// $XDG_RUNTIME_DIR/containers/auth.json, ~/.config/containers/auth.json,
	// ~/.docker/config.json.
	AuthFile string
	// TLSVerify false disables TLS certificate verification and allows
	// plain-HTTP registries (as podman --tls-verify=false).
	TLSVerify bool
	// CertDir holds *.crt (CA), *.cert and *.key (client) files; empty means
	// the per-host certs.d directories (/etc/containers/certs.d/HOST:PORT, …).
	CertDir string
	// SignaturePolicy is a policy.json path; empty means the system policy,
	// or accept-anything when no policy.json exists.
	SignaturePolicy string
	// RegistriesConf overrides the registries.conf path (mirrors, blocked
	// and insecure registries).
	RegistriesConf string
	// Arch selects the image from a manifest list: an RPM arch (x86_64,
	// aarch64, ppc64le, s390x) or a Go arch (amd64, arm64). Empty means the
	// host's architecture.
	Arch string
	// Retries is how many times a transient registry error is retried.
	Retries int
	// RetryDelay is the first wait between attempts; it doubles each time.
	RetryDelay time.Duration
	// Parallel is how many layers are fetched at once (0 means 4).
	Parallel int
	// Debugf receives debug-level messages (may be nil).
	Debugf func(format string, args ...any)

	// systemRoot prefixes the system-wide config paths (tests only).
	systemRoot string
}

// DefaultOptions are the settings podman uses when no flag is given.
func DefaultOptions() Options {
	return Options{TLSVerify: true, Retries: 3, RetryDelay: time.Second}
}

func (o *Options) debugf(format string, args ...any) {
	if o.Debugf != nil {
		o.Debugf(format, args...)
	}
}

// platform is an OCI platform (os/architecture[/variant]).
type platform struct{ OS, Arch, Variant string }

func (p platform) String() string {
	s := p.OS + "/" + p.Arch
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// archAliases maps the architecture names users type to the OCI platform.
var archAliases = map[string]platform{
	"x86_64":  {"linux", "amd64", ""},
	"amd64":   {"linux", "amd64", ""},
	"aarch64": {"linux", "arm64", ""},
	"arm64":   {"linux", "arm64", ""},
	"ppc64le": {"linux", "ppc64le", ""},
	"s390x":   {"linux", "s390x", ""},
}

// ParsePlatform maps an --arch value (RPM or Go name, optionally "linux/…")
// to its OCI platform string, e.g. "x86_64" → "linux/amd64".
func ParsePlatform(arch string) (string, error) {
	p, err := parsePlatform(arch)
	if err != nil {
		return "", err
	}
	return p.String(), nil
}

func parsePlatform(arch string) (platform, error) {
	a := strings.TrimPrefix(arch, "linux/")
	if p, ok := archAliases[a]; ok {
		return p, nil
	}
	valid := make([]string, 0, len(archAliases))
	for k := range archAliases {
		valid = append(valid, k)
	}
	sort.Strings(valid)
	return platform{}, fmt.Errorf("unknown architecture %q (valid: %s)", arch, strings.Join(valid, ", "))
}

// RPMArch maps an --arch value to its RPM name (amd64 → x86_64).
func RPMArch(arch string) (string, error) {
	p, err := parsePlatform(arch)
	if err != nil {
		return "", err
	}
	switch p.Arch {
	case "amd64":
		return "x86_64", nil
	case "arm64":
		return "aarch64", nil
	}
	return p.Arch, nil
}

// SystemContext turns the options into the c/image SystemContext, the same
// for pulls and pushes.
func (o *Options) SystemContext() (*types.SystemContext, error) {
	authFile := o.AuthFile
	if authFile == "" {
		// c/image itself does not read REGISTRY_AUTH_FILE; podman does.
		authFile = os.Getenv("REGISTRY_AUTH_FILE")
	}
	sys := &types.SystemContext{
		AuthFilePath:             authFile,
		DockerCertPath:           o.CertDir,
		SystemRegistriesConfPath: o.RegistriesConf,
		SignaturePolicyPath:      o.SignaturePolicy,
	}
	if !o.TLSVerify {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
		sys.OCIInsecureSkipTLSVerify = true
	}
	if authFile != "" {
		if _, err := os.Stat(authFile); err != nil {
			return nil, fmt.Errorf("reading auth file: %w", err)
		}
	}
	if o.CertDir != "" {
		if st, err := os.Stat(o.CertDir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("reading cert dir %s: not a directory", o.CertDir)
		}
	}
	if o.RegistriesConf != "" {
		if _, err := os.Stat(o.RegistriesConf); err != nil {
			return nil, fmt.Errorf("reading registries.conf: %w", err)
		}
	}
	if o.Arch != "" {
		p, err := parsePlatform(o.Arch)
		if err != nil {
			return nil, err
		}
		sys.OSChoice, sys.ArchitectureChoice, sys.VariantChoice = p.OS, p.Arch, p.Variant
	}
	return sys, nil
}

// authFileCandidates lists the credential files c/image consults, in
// order, for naming the one used in an error.
func (o *Options) authFileCandidates() []string {
	if o.AuthFile != "" {
		return []string{o.AuthFile}
	}
	var c []string
	if f := os.Getenv("REGISTRY_AUTH_FILE"); f != "" {
		return []string{f}
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		c = append(c, filepath.Join(d, "containers", "auth.json"))
	} else {
		c = append(c, fmt.Sprintf("/run/containers/%d/auth.json", os.Getuid()))
	}
	home, _ := os.UserHomeDir()
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		c = append(c, filepath.Join(d, "containers", "auth.json"))
	} else if home != "" {
		c = append(c, filepath.Join(home, ".config", "containers", "auth.json"))
	}
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		c = append(c, filepath.Join(d, "config.json"))
	} else if home != "" {
		c = append(c, filepath.Join(home, ".docker", "config.json"))
	}
	if home != "" {
		c = append(c, filepath.Join(home, ".dockercfg"))
	}
	return c
}
