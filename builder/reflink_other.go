//go:build !linux

package builder

import "os"

func reflink(out, in *os.File) error { return errNoReflink }

func setXattr(path, name string, value []byte) error { return errNoReflink }

func getXattr(path, name string) ([]byte, error) { return nil, errNoReflink }
