package builder

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// NotFound is the version recorded for a tool that is not on PATH.
const NotFound = "not found"

// versionArgs are the arguments that make a tool print its version; tools
// not listed get --version.
var versionArgs = map[string][]string{
	"mksquashfs": {"-version"},
	"unsquashfs": {"-version"},
	"xorriso":    {"-version"},
	"mformat":    {"--version"},
	"isoinfo":    {"-version"},
}

// HostTools probes external tools on PATH once each and remembers the answer.
type HostTools struct {
	mu       sync.Mutex
	versions map[string]string
}

// ToolVersion returns the first line the tool prints for its version, or
// NotFound.
func (h *HostTools) ToolVersion(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.versions[name]; ok {
		return v
	}
	if h.versions == nil {
		h.versions = map[string]string{}
	}
	v := probeVersion(name)
	h.versions[name] = v
	return v
}

func probeVersion(name string) string {
	path, err := exec.LookPath(name)
	if err != nil {
		return NotFound
	}
	args, ok := versionArgs[name]
	if !ok {
		args = []string{"--version"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if name == "mkfs.erofs" {
		// erofs-utils has no version flag; its version is in the dpkg database.
		if out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", "erofs-utils").Output(); err == nil && len(out) > 0 {
			return "erofs-utils " + string(out)
		}
		return "unknown version"
	}
	out, _ := exec.CommandContext(ctx, path, args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		// ostree prints "libostree:" then " Version: '2022.7'".
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version: "); ok {
			return name + " " + strings.Trim(v, "'")
		}
	}
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasSuffix(line, ":") {
			return line
		}
	}
	return "unknown version"
}
