package logtail

import "testing"

func TestLast(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"", 3, ""},
		{"only\n\n", 1, "only"},
	} {
		if got := Last(c.in, c.n); got != c.want {
			t.Errorf("Last(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
