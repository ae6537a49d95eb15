package bootconfig

import (
	"fmt"
	"os/exec"
)

// LookPathFunc finds an executable by name, like exec.LookPath. Options
// take one so callers (and tests) can restrict where tools are found.
type LookPathFunc func(name string) (string, error)

// Tools are the external programs Build runs (for stage cache keys and
// meta.json tool versions).
var Tools = []string{"mformat", "mmd", "mcopy"}

// hostTool is an external program and the packages that ship it.
type hostTool struct {
	name   string
	debian string
	fedora string
}

var (
	toolMformat = hostTool{"mformat", "mtools", "mtools"}
	toolMmd     = hostTool{"mmd", "mtools", "mtools"}
	toolMcopy   = hostTool{"mcopy", "mtools", "mtools"}
)

// find returns the path of the tool or an error that says how to install it.
func (t hostTool) find(look LookPathFunc) (string, error) {
	if look == nil {
		look = exec.LookPath
	}
	p, err := look(t.name)
	if err != nil {
		return "", fmt.Errorf("finding %s: %w (install the Debian package %q or the Fedora package %q)",
			t.name, err, t.debian, t.fedora)
	}
	return p, nil
}
