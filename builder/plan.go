package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Step is one stage of a plan with its cache key.
type Step struct {
	Stage Stage
	// Key is the content address of the stage's output.
	Key string
	// InputKeys maps each input stage type to its key.
	InputKeys map[string]string
	// ToolVersions maps each external tool to its version ("not found" when absent).
	ToolVersions map[string]string
	// Cached reports whether the store already holds the output.
	Cached bool
}

// Plan is the ordered list of stages of a build.
type Plan struct {
	Steps []*Step
}

// Step returns the step of the given stage type, or nil.
func (p *Plan) Step(stageType string) *Step {
	for _, s := range p.Steps {
		if s.Stage.Type() == stageType {
			return s
		}
	}
	return nil
}

// Types lists the stage types in order.
func (p *Plan) Types() []string {
	out := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		out[i] = s.Stage.Type()
	}
	return out
}

// ToolVersioner returns the version of an external tool.
type ToolVersioner interface {
	ToolVersion(name string) string
}

// NewPlan validates the stages' options, checks that every input is
// produced by an earlier stage, and computes the cache keys. Stages must be
// given in execution order.
func NewPlan(stages []Stage, tools ToolVersioner, store *Store) (*Plan, error) {
	p := &Plan{}
	keys := map[string]string{}
	for _, st := range stages {
		typ := st.Type()
		if _, dup := keys[typ]; dup {
			return nil, fmt.Errorf("planning: stage %s appears twice", typ)
		}
		if err := st.Options().Validate(); err != nil {
			return nil, fmt.Errorf("planning stage %s: invalid options: %w", typ, err)
		}
		step := &Step{Stage: st, InputKeys: map[string]string{}, ToolVersions: map[string]string{}}
		for _, in := range st.Inputs() {
			k, ok := keys[in]
			if !ok {
				return nil, fmt.Errorf("planning stage %s: input %s is not produced by an earlier stage (have: %s)",
					typ, in, strings.Join(sortedKeys(keys), ", "))
			}
			step.InputKeys[in] = k
		}
		for _, tool := range st.Tools() {
			step.ToolVersions[tool] = tools.ToolVersion(tool)
		}
		key, err := CacheKey(st, step.InputKeys, step.ToolVersions)
		if err != nil {
			return nil, err
		}
		step.Key = key
		step.Cached = store != nil && store.Has(key)
		keys[typ] = key
		p.Steps = append(p.Steps, step)
	}
	return p, nil
}

// CacheKey is sha256 over the stage type, version, the canonical JSON of its
// options, its input keys and the versions of the tools it runs.
func CacheKey(st Stage, inputKeys, toolVersions map[string]string) (string, error) {
	opts, err := json.Marshal(st.Options())
	if err != nil {
		return "", fmt.Errorf("encoding options of stage %s: %w", st.Type(), err)
	}
	// encoding/json sorts map keys and keeps struct field order, so this
	// document is canonical for a given Go type.
	doc, err := json.Marshal(struct {
		Type    string            `json:"type"`
		Version int               `json:"version"`
		Options json.RawMessage   `json:"options"`
		Inputs  map[string]string `json:"inputs"`
		Tools   map[string]string `json:"tools"`
	}{st.Type(), st.Version(), opts, inputKeys, toolVersions})
	if err != nil {
		return "", fmt.Errorf("encoding cache key of stage %s: %w", st.Type(), err)
	}
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:]), nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// toolPackages names the Debian package that ships each external tool.
var toolPackages = map[string]string{
	"xorriso": "xorriso", "mformat": "mtools", "mmd": "mtools", "mcopy": "mtools",
	"mksquashfs": "squashfs-tools", "mkfs.erofs": "erofs-utils",
}

// CheckTools refuses a plan whose stages still to run (up to stopAfter,
// "" for all) need a tool that is not installed, so a missing xorriso is
// reported before the long stages run rather than after. Tools in optional
// are only needed in some cases (decided when the stage runs).
func (p *Plan) CheckTools(stopAfter string, optional ...string) error {
	var missing []string
	for _, s := range p.Steps {
		if !s.Cached {
			for tool, v := range s.ToolVersions {
				if v == NotFound && !slices.Contains(optional, tool) && !slices.Contains(missing, tool) {
					missing = append(missing, tool)
				}
			}
		}
		if s.Stage.Type() == stopAfter {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	var pkgs []string
	for _, t := range missing {
		if pkg, ok := toolPackages[t]; ok && !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	hint := "install them"
	if len(pkgs) > 0 {
		hint = "on Debian/Ubuntu: apt-get install " + strings.Join(pkgs, " ")
	}
	return fmt.Errorf("the build needs %s, not found on PATH (%s)", strings.Join(missing, ", "), hint)
}
