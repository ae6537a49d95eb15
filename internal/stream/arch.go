package stream

import (
	"fmt"
	"strings"
)

// rpmToGo maps the RPM architecture names used as stream keys to Go/OCI
// names (stream-metadata-go arch.GoArch); names not listed are the same in both.
var rpmToGo = map[string]string{
	"x86_64":  "amd64",
	"aarch64": "arm64",
	"ppc64le": "ppc64le",
	"s390x":   "s390x",
	"riscv64": "riscv64",
}

// Architectures lists the RPM architecture names a stream may use.
func Architectures() []string { return sortedKeys(rpmToGo) }

// GoArch returns the Go/OCI name (amd64, arm64 …) of an RPM architecture.
func GoArch(rpmArch string) (string, error) {
	g, ok := rpmToGo[rpmArch]
	if !ok {
		return "", fmt.Errorf("unknown architecture %q (valid: %s)", rpmArch, strings.Join(Architectures(), ", "))
	}
	return g, nil
}

// RPMArch returns the RPM name of a Go/OCI architecture (or of an RPM name).
func RPMArch(arch string) (string, error) {
	if _, ok := rpmToGo[arch]; ok {
		return arch, nil
	}
	for r, g := range rpmToGo {
		if g == arch {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown architecture %q (valid: %s)", arch, strings.Join(Architectures(), ", "))
}
