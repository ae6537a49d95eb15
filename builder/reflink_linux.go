package builder

import (
	"os"

	"golang.org/x/sys/unix"
)

// reflink shares the data blocks of in with out where the filesystem can
// (btrfs, xfs), which makes publishing large ISOs instant.
func reflink(out, in *os.File) error {
	return unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
}

func setXattr(path, name string, value []byte) error { return unix.Setxattr(path, name, value, 0) }

func getXattr(path, name string) ([]byte, error) {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
