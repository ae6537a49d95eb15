// Package builder is the build engine: it turns a recipe and resolved inputs
// into a plan of stages, computes each stage's cache key, runs the stages
// whose outputs are not yet in the content-addressed store, and reports
// progress. It knows nothing about ISOs or ostree; stages register in
// package stages.
package builder

import (
	"context"
	"io"
)

// Options is a stage's typed option struct. It must encode to JSON
// deterministically (it is part of the cache key) and validate itself.
type Options interface {
	Validate() error
}

// Stage is one step of a build. The engine, not the stage, computes the
// cache key: sha256 over Type, Version, the canonical JSON of Options, the
// keys of the Inputs and the versions of the Tools.
type Stage interface {
	// Type is the stable dotted name, e.g. "live.rootfs".
	Type() string
	// Version changes whenever the stage's output for the same options changes.
	Version() int
	// Options returns the typed options (part of the cache key).
	Options() Options
	// Inputs names the stages (by Type) whose outputs this stage reads.
	Inputs() []string
	// Tools lists the external programs the stage runs; their versions are
	// part of the cache key and recorded in meta.json.
	Tools() []string
	// Run writes the stage's outputs into rc.OutDir and nothing else.
	Run(ctx context.Context, rc *RunContext) error
}

// RunContext is what a running stage may use.
type RunContext struct {
	// OutDir is the only place the stage writes its outputs.
	OutDir string
	// WorkDir is scratch space, removed after the stage unless --keep-work.
	WorkDir string
	// Inputs maps an input stage's Type to its (read-only) output directory.
	Inputs map[string]string
	// Log receives the stage's full log (tool output included).
	Log io.Writer
	// Progress reports progress; stages never write to the terminal.
	Progress StageReporter
}

// StageReporter is the progress interface a stage sees.
type StageReporter interface {
	// Progress reports done out of total units (bytes unless said otherwise);
	// total 0 means unknown.
	Progress(msg string, done, total int64)
	// Message reports one line of status.
	Message(format string, args ...any)
}
