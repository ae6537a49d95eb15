package stream

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks what consumers rely on: a stream name, an RFC 3339
// last-modified, at least one known architecture, and for every artifact a
// location and a lowercase hex sha256. A metal "iso" format must have a disk
// and a "pxe" format all of kernel, initramfs and rootfs. All problems are
// reported, each with its JSON path.
func (s *Stream) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Stream == "" {
		bad("stream: empty")
	}
	if s.Metadata.LastModified == "" {
		bad("metadata.last-modified: empty")
	} else if _, err := time.Parse(time.RFC3339, s.Metadata.LastModified); err != nil {
		bad("metadata.last-modified: %q is not RFC 3339 (e.g. 2025-07-01T21:24:39Z)", s.Metadata.LastModified)
	}
	if len(s.Architectures) == 0 {
		bad("architectures: none")
	}
	for _, arch := range sortedKeys(s.Architectures) {
		a := s.Architectures[arch]
		ap := "architectures." + arch
		if _, err := GoArch(arch); err != nil {
			bad("%s: %v", ap, err)
		}
		if len(a.Artifacts) == 0 {
			bad("%s.artifacts: none", ap)
		}
		for _, plat := range sortedKeys(a.Artifacts) {
			p := a.Artifacts[plat]
			pp := ap + ".artifacts." + plat
			if p.Release == "" {
				bad("%s.release: empty", pp)
			}
			if len(p.Formats) == 0 {
				bad("%s.formats: none", pp)
			}
			for _, fname := range sortedKeys(p.Formats) {
				f := p.Formats[fname]
				fp := pp + ".formats." + fname
				parts := []struct {
					name string
					a    *Artifact
				}{{"disk", f.Disk}, {"kernel", f.Kernel}, {"initramfs", f.Initramfs}, {"rootfs", f.Rootfs}}
				n := 0
				for _, part := range parts {
					if part.a == nil {
						continue
					}
					n++
					ptp := fp + "." + part.name
					if part.a.Location == "" {
						bad("%s.location: empty", ptp)
					}
					if !sha256Hex.MatchString(part.a.Sha256) {
						bad("%s.sha256: %q is not 64 lowercase hex digits", ptp, part.a.Sha256)
					}
					if u := part.a.UncompressedSha256; u != "" && !sha256Hex.MatchString(u) {
						bad("%s.uncompressed-sha256: %q is not 64 lowercase hex digits", ptp, u)
					}
				}
				if n == 0 {
					bad("%s: no artifact (want disk, or kernel+initramfs+rootfs)", fp)
				}
				switch fname {
				case "iso":
					if f.Disk == nil {
						bad("%s.disk: missing", fp)
					}
				case "pxe":
					if f.Kernel == nil || f.Initramfs == nil || f.Rootfs == nil {
						bad("%s: want kernel, initramfs and rootfs", fp)
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("validating stream %q: %w", s.Stream, errors.Join(errs...))
	}
	return nil
}
