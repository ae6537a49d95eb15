//go:build !linux

package builder

import "os"

func reflink(out, in *os.File) error { return errNoReflink }
