// Package stages holds the build's stages: thin glue between the engine's
// Stage contract (package builder) and the format libraries under
// internal/. Each stage reads its inputs' output directories, writes only
// its own, and keeps everything that decides its output in its Options so
// the engine's cache key is complete. Runtime handles that do not change
// the output (a registry client) live outside Options.
package stages

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Stage types, in pipeline order.
const (
	TypePayloadResolve = "payload.resolve"
	TypeImageFetch     = "image.fetch"
	TypeOstreeImport   = "ostree.import"
	TypeSysrootDeploy  = "sysroot.deploy"
	TypeLiveRootfs     = "live.rootfs"
	TypeLiveInitrd     = "live.initrd"
	TypeLiveBootconfig = "live.bootconfig"
	TypeISOMaster      = "iso.master"
	TypeISOCustomize   = "iso.customize"
	TypeStreamEmit     = "stream.emit"
)

// writeJSON writes v as indented JSON to dir/name.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// readJSON reads dir/name into v.
func readJSON(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// linkOrCopy places src at dst, sharing the data when both are in the
// store (objects are immutable, so sharing is safe).
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, in, 0o644)
}
