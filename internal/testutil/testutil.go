// Package testutil holds helpers shared by tests: tool requirements that
// skip when a test is run by hand and fail under CI, and fixture lookup.
package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// InCI reports whether the tests run under CI (CI set to a non-empty value
// other than "false"): then missing tools and fixtures are failures, not skips.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// SkipOrFail skips the test when run by hand and fails it under CI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireTool returns the path of each named program, skipping (or failing
// under CI) when one is not on PATH. Install them with scripts/deps.
func RequireTool(t testing.TB, names ...string) []string {
	t.Helper()
	paths := make([]string, 0, len(names))
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			SkipOrFail(t, "%s not found on PATH (run scripts/deps as root)", n)
		}
		paths = append(paths, p)
	}
	return paths
}

// Run runs a program and returns its standard output; the test fails with
// the command line, the error and the program's output when it does not
// succeed. It runs with LC_ALL=C and TZ=UTC, so listings (dates, sort order)
// do not depend on the host's locale or time zone.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// RequireRoot skips (or fails under CI) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root")
	}
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// SharedFixtures returns ../shared/fixtures/<rel> beside the repository.
// The upstream fixtures are optional: the test skips cleanly (also under CI)
// when they are absent.
func SharedFixtures(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "..", "shared", "fixtures", rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared fixture %s absent", p)
	}
	return p
}
