package initrd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"

	"github.com/okd-project/scos-builder/internal/cpio"
)

// StreamHashChunk is the chunk size of the live rootfs stream hash.
const StreamHashChunk = 2 << 20

// StreamHash returns the contents of etc/coreos-live-want-rootfs for the
// data read from r: "stream-hash sha256 2097152\n" and the sha256 of every
// 2 MiB chunk, one per line. The live initramfs checks rootfs.img with it.
func StreamHash(r io.Reader) (string, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "stream-hash sha256 %d\n", StreamHashChunk)
	buf := make([]byte, StreamHashChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			sum := sha256.Sum256(buf[:n])
			b.WriteString(hex.EncodeToString(sum[:]))
			b.WriteByte('\n')
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return b.String(), nil
		}
		if err != nil {
			return "", fmt.Errorf("computing stream hash: %w", err)
		}
	}
}

// LiveStamps are the files appended to the image's initramfs.
type LiveStamps struct {
	// Version goes to etc/coreos-live-initramfs ("<version>\n").
	Version string
	// Features is etc/coreos/features.json.
	Features []byte
	// RootfsStreamHash is etc/coreos-live-want-rootfs (see StreamHash).
	RootfsStreamHash string
	// MTime is SOURCE_DATE_EPOCH, the mtime of the cpio members.
	MTime int64
}

// WriteLiveInitrd writes initrd.img: base (the image's initramfs.img),
// NUL-padded to 4 bytes, then a gzip -9 newc cpio with etc/,
// etc/coreos-live-initramfs, etc/coreos/, etc/coreos/features.json and
// etc/coreos-live-want-rootfs, NUL-padded to 4 bytes. It returns the
// number of bytes written.
func WriteLiveInitrd(out io.Writer, base io.Reader, stamps LiveStamps) (int64, error) {
	if stamps.Version == "" || stamps.RootfsStreamHash == "" || len(stamps.Features) == 0 {
		return 0, errors.New("writing initrd.img: the version, features.json and rootfs stream hash are all required")
	}
	n, err := io.Copy(out, base)
	if err != nil {
		return n, fmt.Errorf("writing initrd.img: copying the initramfs: %w", err)
	}
	var archive bytes.Buffer
	archive.Write(make([]byte, pad4(n)))
	gz, err := gzip.NewWriterLevel(&archive, gzip.BestCompression)
	if err != nil {
		return n, fmt.Errorf("writing initrd.img: %w", err)
	}
	c := cpio.NewWriter(gz)
	t := uint32(stamps.MTime)
	dir := func(ino uint32, name string) cpio.Header {
		return cpio.Header{Name: name, Ino: ino, Mode: cpio.ModeDir | 0o755, NLink: 2, Mtime: t}
	}
	file := func(ino uint32, name string) cpio.Header {
		return cpio.Header{Name: name, Ino: ino, Mode: cpio.ModeRegular | 0o644, NLink: 1, Mtime: t}
	}
	for _, e := range []struct {
		h    cpio.Header
		data []byte
	}{
		{dir(1, "etc"), nil},
		{file(2, "etc/coreos-live-initramfs"), []byte(stamps.Version + "\n")},
		{dir(3, "etc/coreos"), nil},
		{file(4, "etc/coreos/features.json"), stamps.Features},
		{file(5, "etc/coreos-live-want-rootfs"), []byte(stamps.RootfsStreamHash)},
	} {
		e.h.Size = int64(len(e.data))
		if err := c.WriteEntry(&e.h, bytes.NewReader(e.data)); err != nil {
			return n, fmt.Errorf("writing initrd.img: %w", err)
		}
	}
	if err := c.Close(); err != nil {
		return n, fmt.Errorf("writing initrd.img: %w", err)
	}
	if err := gz.Close(); err != nil {
		return n, fmt.Errorf("writing initrd.img: %w", err)
	}
	archive.Write(make([]byte, pad4(n+int64(archive.Len()))))
	m, err := out.Write(archive.Bytes())
	if err != nil {
		return n + int64(m), fmt.Errorf("writing initrd.img: %w", err)
	}
	return n + int64(m), nil
}
