package liveiso

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5"
	"github.com/coreos/vcontext/report"
)

// IgnitionError is an Ignition config that does not parse or validate. Each
// problem names its JSON path, line and column where Ignition reports them.
type IgnitionError struct {
	Err      error    // Ignition's summary, e.g. "config is not valid"
	Problems []string // "$.storage.files.0.path (line 2, column 30): path not absolute"
}

func (e *IgnitionError) Error() string {
	if len(e.Problems) == 0 {
		return "invalid Ignition config: " + e.Err.Error()
	}
	return "invalid Ignition config: " + strings.Join(e.Problems, "; ")
}

func (e *IgnitionError) Unwrap() error { return e.Err }

// ValidateIgnition parses config as an Ignition config of spec 3.0 to 3.5
// and validates it. It returns the warnings Ignition reports for a config it
// accepts, and an *IgnitionError for one it rejects.
func ValidateIgnition(config []byte) (warnings []string, err error) {
	_, rpt, err := v3_5.ParseCompatibleVersion(config)
	var problems []string
	for _, e := range rpt.Entries {
		msg := describeEntry(e, config)
		if e.Kind.IsFatal() {
			problems = append(problems, msg)
		} else {
			warnings = append(warnings, e.Kind.String()+": "+msg)
		}
	}
	if err == nil && rpt.IsFatal() {
		err = errors.New("config is not valid")
	}
	if err != nil {
		if len(problems) == 0 && !strings.Contains(err.Error(), "not valid") {
			problems = []string{err.Error()}
		}
		return warnings, &IgnitionError{Err: err, Problems: problems}
	}
	return warnings, nil
}

func describeEntry(e report.Entry, config []byte) string {
	var at []string
	if e.Context.Len() != 0 {
		at = append(at, e.Context.String())
	}
	line, col := int64(0), int64(0)
	if e.Marker.StartP != nil {
		line, col = e.Marker.Start()
	}
	if line == 0 {
		// Ignition gives no position for a truncated document; take the
		// one encoding/json reports.
		var v any
		var se *json.SyntaxError
		if errors.As(json.Unmarshal(config, &v), &se) {
			line, col = position(config, se.Offset)
		}
	}
	if line > 0 {
		at = append(at, fmt.Sprintf("(line %d, column %d)", line, col))
	}
	if len(at) == 0 {
		return e.Message
	}
	return strings.Join(at, " ") + ": " + e.Message
}

// position converts a byte offset into a 1-based line and column.
func position(b []byte, off int64) (line, col int64) {
	off = min(max(off, 0), int64(len(b)))
	before := b[:off]
	line = int64(bytes.Count(before, []byte("\n"))) + 1
	col = off - int64(bytes.LastIndexByte(before, '\n'))
	return line, col
}
