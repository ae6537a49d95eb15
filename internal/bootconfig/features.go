package bootconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// InstallerExampleConfig is where a CoreOS image ships coreos-installer's
// example config; its top-level keys are the installer config directives
// the image's coreos-installer understands.
const InstallerExampleConfig = "usr/share/coreos-installer/example-config.yaml"

// Features is coreos/features.json (and the initramfs's
// etc/coreos/features.json), read by coreos-installer {iso,pxe} customize.
type Features struct {
	InstallerConfig           bool            `json:"installer-config"`
	InstallerConfigDirectives map[string]bool `json:"installer-config-directives"`
	LiveInitrdNetwork         bool            `json:"live-initrd-network"`
}

// FeaturesJSON returns the features.json bytes for the image at root, as
// coreos-assembler writes them (indent 2, sorted keys, trailing newline).
// An image without coreos-installer's example config gets no directives
// and a warning.
func FeaturesJSON(root string) (data []byte, warning string, err error) {
	f := Features{InstallerConfig: true, LiveInitrdNetwork: true, InstallerConfigDirectives: map[string]bool{}}
	p := filepath.Join(root, InstallerExampleConfig)
	raw, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		warning = fmt.Sprintf("%s is missing: features.json lists no installer config directives", InstallerExampleConfig)
	case err != nil:
		return nil, "", fmt.Errorf("reading installer features: %w", err)
	default:
		var doc map[string]yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return nil, "", fmt.Errorf("reading installer features from %s: %w", InstallerExampleConfig, err)
		}
		for k := range doc {
			f.InstallerConfigDirectives[k] = true
		}
	}
	data, err = marshalJSON(f)
	if err != nil {
		return nil, "", fmt.Errorf("encoding features.json: %w", err)
	}
	return data, warning, nil
}
