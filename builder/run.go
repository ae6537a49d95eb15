package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/okd-project/scos-builder/internal/logtail"
)

// RunOptions control one execution of a plan.
type RunOptions struct {
	// StopAfter ends the run after the stage of this type ("" runs all).
	StopAfter string
	// KeepWork keeps each stage's scratch directory (and says where).
	KeepWork bool
	// Reporter receives progress; nil discards it.
	Reporter Reporter
}

// Result maps each executed (or cached) stage type to its output directory.
type Result struct {
	OutDirs map[string]string
	// Ran lists the stages that ran (were not cached), in order.
	Ran []string
}

// StageError is the error of a failed stage: it names the stage and carries
// the tail of its log and where the full log is.
type StageError struct {
	Stage   string
	LogPath string
	LogTail string
	Err     error
}

func (e *StageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "running stage %s: %v", e.Stage, e.Err)
	if e.LogTail != "" {
		fmt.Fprintf(&b, "\nlast lines of the stage log:\n%s", e.LogTail)
	}
	if e.LogPath != "" {
		fmt.Fprintf(&b, "\nfull log: %s", e.LogPath)
	}
	return b.String()
}

func (e *StageError) Unwrap() error { return e.Err }

// logTailLines is how much of a failed stage's log the error shows.
const logTailLines = 20

// Run executes the plan's stages in order, taking cached outputs from the
// store and storing new ones atomically.
func Run(ctx context.Context, store *Store, plan *Plan, opts RunOptions) (*Result, error) {
	rep := opts.Reporter
	if rep == nil {
		rep = discardReporter{}
	}
	if opts.StopAfter != "" && plan.Step(opts.StopAfter) == nil {
		return nil, fmt.Errorf("unknown stage %q for --stop-after (valid: %s)", opts.StopAfter, strings.Join(plan.Types(), ", "))
	}
	res := &Result{OutDirs: map[string]string{}}
	for _, step := range plan.Steps {
		typ := step.Stage.Type()
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("running stage %s: %w", typ, err)
		}
		if store.Has(step.Key) {
			step.Cached = true
			rep.StageStart(typ, true)
			res.OutDirs[typ] = store.OutDir(step.Key)
		} else {
			step.Cached = false
			out, err := runStep(ctx, store, step, res.OutDirs, opts, rep)
			if err != nil {
				return res, err
			}
			res.OutDirs[typ] = out
			res.Ran = append(res.Ran, typ)
		}
		if typ == opts.StopAfter {
			break
		}
	}
	return res, nil
}

func runStep(ctx context.Context, store *Store, step *Step, outDirs map[string]string, opts RunOptions, rep Reporter) (string, error) {
	st := step.Stage
	typ := st.Type()
	p, err := store.begin(step.Key)
	if err != nil {
		return "", fmt.Errorf("running stage %s: %w", typ, err)
	}
	logf, err := os.Create(p.logPath())
	if err != nil {
		p.abort(typ)
		return "", fmt.Errorf("running stage %s: creating log: %w", typ, err)
	}
	// A directory of its own: a concurrent build of the same key must not
	// share (or delete) this one's scratch files.
	work, err := os.MkdirTemp(filepath.Join(store.Dir(), "work"), typ+"-"+step.Key[:16]+"-")
	if err != nil {
		logf.Close()
		p.abort(typ)
		return "", fmt.Errorf("running stage %s: creating work directory: %w", typ, err)
	}
	inputs := map[string]string{}
	for in := range step.InputKeys {
		inputs[in] = outDirs[in]
	}
	rc := &RunContext{
		OutDir:   p.outDir(),
		WorkDir:  work,
		Inputs:   inputs,
		Log:      logf,
		Progress: stageReporter{r: rep, stage: typ},
	}
	fmt.Fprintf(logf, "stage %s version %d key %s\n", typ, st.Version(), step.Key)
	rep.StageStart(typ, false)
	start := time.Now()
	runErr := safeRun(ctx, st, rc)
	if runErr == nil && ctx.Err() != nil {
		runErr = ctx.Err()
	}
	elapsed := time.Since(start)
	if runErr != nil {
		fmt.Fprintf(logf, "error: %v\n", runErr)
	}
	logf.Close()
	if opts.KeepWork {
		rep.StageMessage(typ, "work directory kept: "+work)
	} else {
		os.RemoveAll(work)
	}
	if runErr != nil {
		rep.StageDone(typ, elapsed, runErr)
		tail := readTail(p.logPath(), logTailLines)
		logPath := p.abort(typ)
		return "", &StageError{Stage: typ, LogPath: logPath, LogTail: tail, Err: runErr}
	}
	optsJSON, _ := json.Marshal(st.Options())
	meta := &Meta{
		Key: step.Key, Type: typ, Version: st.Version(), Options: optsJSON,
		Inputs: step.InputKeys, ToolVersions: step.ToolVersions,
		Created: time.Now().UTC(), DurationMS: elapsed.Milliseconds(),
	}
	if err := p.commit(meta); err != nil {
		rep.StageDone(typ, elapsed, err)
		p.abort(typ)
		return "", fmt.Errorf("running stage %s: %w", typ, err)
	}
	rep.StageDone(typ, elapsed, nil)
	return store.OutDir(step.Key), nil
}

// safeRun turns a stage panic into an error so the pending object is
// cleaned up like any other failure.
func safeRun(ctx context.Context, st Stage, rc *RunContext) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("stage panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return st.Run(ctx, rc)
}

func readTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return logtail.Last(string(b), n)
}

type discardReporter struct{}

func (discardReporter) StageStart(string, bool)                    {}
func (discardReporter) StageProgress(string, string, int64, int64) {}
func (discardReporter) StageMessage(string, string)                {}
func (discardReporter) StageDone(string, time.Duration, error)     {}
func (discardReporter) Close()                                     {}

// IsCanceled reports whether err comes from a canceled context (Ctrl-C).
func IsCanceled(err error) bool {
	return errors.Is(err, context.Canceled)
}
