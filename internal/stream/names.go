package stream

import (
	"fmt"
	"strings"
)

// LiveNames are the file names of one architecture's live artifacts, as
// coreos-assembler names them: <prefix>-<release>-live-iso.<arch>.iso and so on.
type LiveNames struct {
	ISO       string
	Kernel    string
	Initramfs string
	Rootfs    string
}

// LiveArtifactNames returns the live artifact file names for a recipe's
// artifact prefix (e.g. "scos"), a build release and an RPM architecture.
func LiveArtifactNames(prefix, release, arch string) (LiveNames, error) {
	if err := checkNamePart("artifact prefix", prefix); err != nil {
		return LiveNames{}, err
	}
	if err := checkNamePart("release", release); err != nil {
		return LiveNames{}, err
	}
	if _, err := GoArch(arch); err != nil {
		return LiveNames{}, err
	}
	base := prefix + "-" + release
	return LiveNames{
		ISO:       fmt.Sprintf("%s-live-iso.%s.iso", base, arch),
		Kernel:    fmt.Sprintf("%s-live-kernel.%s", base, arch),
		Initramfs: fmt.Sprintf("%s-live-initramfs.%s.img", base, arch),
		Rootfs:    fmt.Sprintf("%s-live-rootfs.%s.img", base, arch),
	}, nil
}

// FileName is the stream file name for a recipe's artifact prefix: <prefix>.json.
func FileName(prefix string) string { return prefix + ".json" }

// checkNamePart refuses values that cannot be part of a single file name.
func checkNamePart(what, v string) error {
	if v == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if strings.ContainsAny(v, "/\\\x00") || v == "." || v == ".." || strings.TrimSpace(v) != v {
		return fmt.Errorf("%s %q cannot be part of a file name", what, v)
	}
	return nil
}
