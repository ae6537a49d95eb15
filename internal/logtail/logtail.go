// Package logtail cuts program output down to its end for error messages:
// the last lines of a tool's stderr or of a console transcript say why it
// failed.
package logtail

import "strings"

// Last returns the last n lines of s, without a trailing newline.
func Last(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
