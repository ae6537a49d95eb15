// Package liveiso reads and customizes CoreOS live ISOs the way
// coreos-installer's `iso ignition` and `iso kargs` commands do, so that
// either tool works on an ISO the other has edited.
//
// Files are located through the ISO9660 primary directory tree by their 8.3
// uppercase names. coreos/igninfo.json names the Ignition embed area (default
// images/ignition.img; on s390x a range inside images/cdboot.img);
// coreos/kargs.json names the kernel argument areas (older ISOs: the coreKarg
// header in the system area). The Ignition area holds a sequence of newc
// archives (plain, gzip, xz or zstd) padded with zeros; all zeros means "not
// customized". This package writes one xz (CRC32) archive, members sorted,
// parent directories included, other members preserved.
//
// Edits are staged on an ISO and then written in place (Save: only the
// areas' bytes are written, so the time does not depend on the ISO's size)
// or as a copy (Stream, SaveAs). Every area's new bytes are computed and
// checked before the first byte is written, and a copy is written under a
// temporary name and linked into place, so a failure never leaves a
// half-written ISO at the output path.
//
// Open also serves to check ISOs we build: the ISO exposes the volume ID,
// the areas with absolute offsets, features.json and the El Torito entries,
// and Verify checks a freshly built ISO against what coreos-installer,
// assisted-image-service and the live initramfs expect.
package liveiso

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Primary-tree paths coreos-installer looks up.
const (
	igninfoPath         = "COREOS/IGNINFO.JSO"
	kargsPath           = "COREOS/KARGS.JSO"
	featuresPath        = "COREOS/FEATURES.JSO"
	defaultIgnitionFile = "images/ignition.img"
)

// maxJSONFile bounds the size of the coreos/*.json files we read.
const maxJSONFile = 1 << 20

// IgnitionArea is the Ignition embed area.
type IgnitionArea struct {
	File       string `json:"file"`        // as in igninfo.json, or images/ignition.img
	FileOffset int64  `json:"file_offset"` // offset inside File
	Offset     int64  `json:"offset"`      // absolute offset in the ISO
	Length     int64  `json:"length"`
}

// Features is coreos/features.json: what the live image supports.
type Features struct {
	InstallerConfig           bool            `json:"installer-config"`
	InstallerConfigDirectives map[string]bool `json:"installer-config-directives,omitempty"`
	LiveInitrdNetwork         bool            `json:"live-initrd-network"`
}

// Extent is where a file of the primary tree lies in the ISO.
type Extent struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// ISO is an opened CoreOS live ISO with its embed areas.
type ISO struct {
	Path     string
	Size     int64  // bytes in the file
	VolumeID string // primary volume identifier
	Ignition IgnitionArea
	Kargs    *KargsAreas // nil when the ISO has no karg areas
	Features *Features   // nil when the ISO has no coreos/features.json

	f        *os.File
	writable bool
	fs       *isoFS
	initrd   *Initrd
	pending  map[int64][]byte // staged area contents by absolute offset
}

// Open opens a live ISO read-only. Use it to inspect an ISO, or to edit one
// and write the result with WriteTo or SaveAs.
func Open(path string) (*ISO, error) { return open(path, false) }

// OpenForUpdate opens a live ISO for reading and writing, for Save.
func OpenForUpdate(path string) (*ISO, error) { return open(path, true) }

func open(path string, writable bool) (*ISO, error) {
	flag := os.O_RDONLY
	if writable {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		if writable {
			return nil, fmt.Errorf("opening %s for writing: %w", path, err)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	iso, err := load(f, path, writable)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return iso, nil
}

func load(f *os.File, path string, writable bool) (*ISO, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() && st.Mode()&os.ModeDevice == 0 {
		return nil, errors.New("not a regular file or block device")
	}
	size := st.Size()
	if st.Mode()&os.ModeDevice != 0 {
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			return nil, err
		}
	}
	fs, err := readISO(f, size)
	if err != nil {
		return nil, err
	}
	iso := &ISO{Path: path, Size: size, VolumeID: fs.volumeID, f: f, writable: writable, fs: fs, pending: map[int64][]byte{}}
	if err := iso.loadIgnition(); err != nil {
		return nil, err
	}
	if err := iso.loadKargs(); err != nil {
		return nil, err
	}
	if err := iso.loadFeatures(); err != nil {
		return nil, err
	}
	return iso, iso.checkOverlaps()
}

// readJSON decodes a coreos/*.json file; found is false when it is absent.
func (iso *ISO) readJSON(path string, v any) (found bool, err error) {
	r, err := iso.fs.lookupFile(path)
	if errors.Is(err, errNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", path, err)
	}
	b, err := iso.fs.readFile(r, maxJSONFile)
	if err != nil {
		return true, err
	}
	// kargs.json may have been rewritten in place and padded with spaces.
	if err := json.Unmarshal(bytes.TrimRight(b, " \x00"), v); err != nil {
		return true, fmt.Errorf("decoding %s: %w", path, err)
	}
	return true, nil
}

func (iso *ISO) loadIgnition() error {
	var info struct {
		File   *string `json:"file"`
		Offset *int64  `json:"offset"`
		Length *int64  `json:"length"`
	}
	found, err := iso.readJSON(igninfoPath, &info)
	if err != nil {
		return err
	}
	area := IgnitionArea{File: defaultIgnitionFile}
	if found {
		if info.File == nil {
			return fmt.Errorf("decoding %s: no \"file\"", igninfoPath)
		}
		area.File = *info.File
	}
	upper := strings.ToUpper(area.File)
	rec, err := iso.fs.lookupFile(upper)
	if errors.Is(err, errNotFound) {
		if found {
			return fmt.Errorf("not a CoreOS live ISO: %s names %s, which is missing", igninfoPath, upper)
		}
		return fmt.Errorf("not a CoreOS live ISO: neither %s nor %s exists", igninfoPath, upper)
	}
	if err != nil {
		return fmt.Errorf("looking up the Ignition embed area: %w", err)
	}
	if info.Offset != nil {
		area.FileOffset = *info.Offset
	}
	area.Length = int64(rec.length) - area.FileOffset
	if info.Length != nil {
		area.Length = *info.Length
	}
	if area.FileOffset < 0 || area.Length <= 0 || area.FileOffset+area.Length > int64(rec.length) {
		return fmt.Errorf("Ignition embed area (offset %d, length %d) does not lie within %s (%d bytes)",
			area.FileOffset, area.Length, upper, rec.length)
	}
	if area.Length > 64<<20 {
		return fmt.Errorf("Ignition embed area of %d bytes is implausibly large", area.Length)
	}
	area.Offset = rec.offset() + area.FileOffset
	iso.Ignition = area

	buf := make([]byte, area.Length)
	if _, err := iso.f.ReadAt(buf, area.Offset); err != nil {
		return fmt.Errorf("reading the Ignition embed area: %w", noEOF(err))
	}
	if iso.initrd, err = ParseInitrd(buf); err != nil {
		return fmt.Errorf("decoding the Ignition embed area: %w", err)
	}
	return nil
}

func (iso *ISO) loadKargs() error {
	var info struct {
		Default *string `json:"default"`
		Files   []struct {
			Path   *string `json:"path"`
			Offset *int64  `json:"offset"`
			Pad    *string `json:"pad"`
			End    *string `json:"end"`
		} `json:"files"`
		Size *int `json:"size"`
	}
	found, err := iso.readJSON(kargsPath, &info)
	if err != nil {
		return err
	}
	if !found {
		return iso.loadLegacyKargs()
	}
	if info.Default == nil || info.Size == nil || info.Files == nil {
		return fmt.Errorf("decoding %s: \"default\", \"files\" and \"size\" are required", kargsPath)
	}
	k := &KargsAreas{Default: *info.Default, Size: *info.Size}
	if k.Size <= 0 || k.Size > maxKargsSize {
		return fmt.Errorf("karg embed area size must be 1 to %d bytes (found %d)", maxKargsSize, k.Size)
	}
	if len(k.Default) > k.Size {
		return fmt.Errorf("default kargs size %d larger than embed areas (%d)", len(k.Default), k.Size)
	}
	for _, f := range info.Files {
		if f.Path == nil || f.Offset == nil {
			return fmt.Errorf("decoding %s: every file needs \"path\" and \"offset\"", kargsPath)
		}
		pad, err := oneByte(f.Pad, '#')
		if err != nil {
			return fmt.Errorf("decoding %s: pad of %s: %w", kargsPath, *f.Path, err)
		}
		end, err := oneByte(f.End, '\n')
		if err != nil {
			return fmt.Errorf("decoding %s: end of %s: %w", kargsPath, *f.Path, err)
		}
		upper := strings.ToUpper(*f.Path)
		rec, err := iso.fs.lookupFile(upper)
		if err != nil {
			return fmt.Errorf("looking up karg embed area file %s: %w", *f.Path, err)
		}
		if *f.Offset < 0 || *f.Offset+int64(k.Size) > int64(rec.length) {
			return fmt.Errorf("karg embed area at offset %d does not lie within %s (%d bytes)", *f.Offset, upper, rec.length)
		}
		k.Areas = append(k.Areas, KargsArea{File: *f.Path, FileOffset: *f.Offset,
			Offset: rec.offset() + *f.Offset, Pad: string(pad), End: string(end)})
	}
	return iso.finishKargs(k)
}

func oneByte(s *string, def byte) (byte, error) {
	if s == nil {
		return def, nil
	}
	if len(*s) != 1 {
		return 0, fmt.Errorf("want a single ASCII character, got %q", *s)
	}
	return (*s)[0], nil
}

// Legacy coreKarg header: 72 bytes just before the coreiso+ header at the
// end of the system area.
const (
	legacyKargsHeaderOffset = 32768 - 24 - 72
	legacyKargsMaxAreas     = 6
)

func (iso *ISO) loadLegacyKargs() error {
	var hdr [72]byte
	if _, err := iso.f.ReadAt(hdr[:], legacyKargsHeaderOffset); err != nil {
		return fmt.Errorf("reading karg embed header: %w", noEOF(err))
	}
	if string(hdr[:8]) != "coreKarg" {
		return nil
	}
	size := binary.LittleEndian.Uint64(hdr[8:])
	if size == 0 || size > maxKargsSize {
		return fmt.Errorf("karg embed area length must be 1 to %d bytes (found %d)", maxKargsSize, size)
	}
	k := &KargsAreas{Size: int(size), Legacy: true}
	defOff := int64(binary.LittleEndian.Uint64(hdr[16:]))
	def, err := iso.readArea(defOff, k.Size)
	if err != nil {
		return fmt.Errorf("reading default kargs: %w", err)
	}
	if k.Default, err = parseKargs(def, '#', '\n'); err != nil {
		return err
	}
	for i := 0; i < legacyKargsMaxAreas; i++ {
		off := int64(binary.LittleEndian.Uint64(hdr[24+8*i:]))
		if off == 0 {
			break
		}
		k.Areas = append(k.Areas, KargsArea{Offset: off, FileOffset: off, Pad: "#", End: "\n"})
	}
	return iso.finishKargs(k)
}

func (iso *ISO) readArea(off int64, n int) ([]byte, error) {
	if off < 0 || off+int64(n) > iso.Size {
		return nil, fmt.Errorf("area at offset %d (%d bytes) is beyond the end of the image", off, n)
	}
	b := make([]byte, n)
	if _, err := iso.f.ReadAt(b, off); err != nil {
		return nil, noEOF(err)
	}
	return b, nil
}

// finishKargs reads the current kargs from every area; they must agree.
func (iso *ISO) finishKargs(k *KargsAreas) error {
	if len(k.Areas) == 0 {
		return errors.New("no karg embed areas found; corrupted CoreOS ISO image")
	}
	sort.Slice(k.Areas, func(i, j int) bool { return k.Areas[i].Offset < k.Areas[j].Offset })
	for i, a := range k.Areas {
		b, err := iso.readArea(a.Offset, k.Size)
		if err != nil {
			return fmt.Errorf("reading kargs embed area: %w", err)
		}
		cur, err := parseKargs(b, a.Pad[0], a.End[0])
		if err != nil {
			return fmt.Errorf("reading kargs embed area at offset %d: %w", a.Offset, err)
		}
		if i == 0 {
			k.Current = cur
		} else if cur != k.Current {
			return fmt.Errorf("kargs don't match at all offsets! (expected %q, but offset %d has: %q)", k.Current, a.Offset, cur)
		}
	}
	iso.Kargs = k
	return nil
}

func (iso *ISO) loadFeatures() error {
	var f Features
	found, err := iso.readJSON(featuresPath, &f)
	if err != nil {
		return err
	}
	if found {
		iso.Features = &f
	}
	return nil
}

// checkOverlaps makes sure no two areas share a byte, so writing one can
// never clobber another.
func (iso *ISO) checkOverlaps() error {
	type span struct {
		name     string
		off, end int64
	}
	spans := []span{{"Ignition embed area", iso.Ignition.Offset, iso.Ignition.Offset + iso.Ignition.Length}}
	if iso.Kargs != nil {
		for _, a := range iso.Kargs.Areas {
			spans = append(spans, span{"karg embed area in " + a.File, a.Offset, a.Offset + int64(iso.Kargs.Size)})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	for i := 1; i < len(spans); i++ {
		if spans[i].off < spans[i-1].end {
			return fmt.Errorf("%s overlaps %s", spans[i].name, spans[i-1].name)
		}
	}
	return nil
}

// Close closes the ISO file. Staged edits that were not written are lost.
func (iso *ISO) Close() error { return iso.f.Close() }

// Stat returns where a file of the primary tree lies, path in 8.3 uppercase
// ("IMAGES/PXEBOOT/ROOTFS.IMG").
func (iso *ISO) Stat(path string) (Extent, error) {
	r, err := iso.fs.lookupFile(path)
	if err != nil {
		return Extent{}, err
	}
	return Extent{Offset: r.offset(), Length: int64(r.length)}, nil
}

// ReadFile returns the content of a file of the primary tree (at most 64 MiB).
func (iso *ISO) ReadFile(path string) ([]byte, error) {
	r, err := iso.fs.lookupFile(path)
	if err != nil {
		return nil, err
	}
	return iso.fs.readFile(r, 64<<20)
}

// BootEntries returns the El Torito boot catalog entries.
func (iso *ISO) BootEntries() ([]BootEntry, error) { return iso.fs.bootEntries() }

// Initrd returns the content of the Ignition embed area, with staged edits.
// The caller must not modify it; use SetInitrd.
func (iso *ISO) Initrd() *Initrd { return iso.initrd }

// IgnitionConfig returns the embedded Ignition config, if there is one.
func (iso *ISO) IgnitionConfig() ([]byte, bool) {
	b, ok := iso.initrd.Members[IgnitionMember]
	return b, ok
}

// ErrAlreadyEmbedded is returned by EmbedIgnition without force when the ISO
// already carries a config.
var ErrAlreadyEmbedded = errors.New("this ISO image already has an embedded Ignition config")

// EmbedIgnition stages config as the Ignition config, keeping the area's
// other members. It does not validate config; see ValidateIgnition.
func (iso *ISO) EmbedIgnition(config []byte, force bool) error {
	if _, ok := iso.IgnitionConfig(); ok && !force {
		return ErrAlreadyEmbedded
	}
	in := iso.copyInitrd()
	in.Members[IgnitionMember] = append([]byte(nil), config...)
	return iso.SetInitrd(in)
}

// RemoveIgnition stages the removal of the Ignition config; an area left
// with no members becomes all zeros again.
func (iso *ISO) RemoveIgnition() error {
	in := iso.copyInitrd()
	delete(in.Members, IgnitionMember)
	return iso.SetInitrd(in)
}

func (iso *ISO) copyInitrd() *Initrd {
	in := &Initrd{Members: make(map[string][]byte, len(iso.initrd.Members))}
	for k, v := range iso.initrd.Members {
		in.Members[k] = v
	}
	return in
}

// AreaTooSmallError is an initrd that does not fit in the Ignition area.
type AreaTooSmallError struct{ Need, Have int64 }

func (e *AreaTooSmallError) Error() string {
	return fmt.Sprintf("the Ignition embed area is too small: the compressed archive needs %d bytes, the area holds %d", e.Need, e.Have)
}

// SetInitrd stages in as the content of the Ignition embed area.
func (iso *ISO) SetInitrd(in *Initrd) error {
	area := make([]byte, iso.Ignition.Length)
	if !in.Empty() {
		b, err := in.Bytes()
		if err != nil {
			return err
		}
		if int64(len(b)) > iso.Ignition.Length {
			return &AreaTooSmallError{Need: int64(len(b)), Have: iso.Ignition.Length}
		}
		copy(area, b)
	}
	iso.pending[iso.Ignition.Offset] = area
	iso.initrd = in
	return nil
}

// ErrNoKargs is returned for kargs operations on an ISO without karg areas.
var ErrNoKargs = errors.New("no karg embed areas found; old or corrupted CoreOS ISO image")

// SetKargs stages kargs (surrounding white space removed) in every karg
// area. The longest accepted string is Size-1 bytes.
func (iso *ISO) SetKargs(kargs string) error {
	if iso.Kargs == nil {
		return ErrNoKargs
	}
	staged := map[int64][]byte{}
	for _, a := range iso.Kargs.Areas {
		b, err := formatKargs(kargs, iso.Kargs.Size, a.Pad[0], a.End[0])
		if err != nil {
			return err
		}
		staged[a.Offset] = b
	}
	for off, b := range staged {
		iso.pending[off] = b
	}
	iso.Kargs.Current = strings.TrimSpace(kargs)
	return nil
}

// Modified reports whether edits are staged.
func (iso *ISO) Modified() bool { return len(iso.pending) > 0 }

type region struct {
	off  int64
	data []byte
}

func (iso *ISO) regions() []region {
	rs := make([]region, 0, len(iso.pending))
	for off, b := range iso.pending {
		rs = append(rs, region{off, b})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].off < rs[j].off })
	return rs
}

// Save writes the staged edits into the ISO file itself, touching only the
// areas' bytes, then syncs and reads them back to check them.
func (iso *ISO) Save() error {
	if !iso.writable {
		return fmt.Errorf("writing %s: opened read-only", iso.Path)
	}
	rs := iso.regions()
	for _, r := range rs {
		if _, err := iso.f.WriteAt(r.data, r.off); err != nil {
			return fmt.Errorf("writing %s at offset %d: %w", iso.Path, r.off, err)
		}
	}
	if err := iso.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", iso.Path, err)
	}
	for _, r := range rs {
		b, err := iso.readArea(r.off, len(r.data))
		if err != nil || !bytes.Equal(b, r.data) {
			return fmt.Errorf("verifying %s at offset %d: the written bytes do not read back", iso.Path, r.off)
		}
	}
	clear(iso.pending)
	return nil
}

// WriteTo writes a copy of the ISO with the staged edits to w.
func (iso *ISO) WriteTo(w io.Writer) (int64, error) { return iso.Stream(context.Background(), w) }

// copyChunk is how much is copied between checks for cancellation.
const copyChunk = 64 << 20

// Stream writes a copy of the ISO with the staged edits to w, stopping with
// ctx's error when ctx is cancelled.
func (iso *ISO) Stream(ctx context.Context, w io.Writer) (int64, error) {
	var written, cur int64
	copyTo := func(end int64) error {
		if _, err := iso.f.Seek(cur, io.SeekStart); err != nil {
			return err
		}
		for cur < end {
			if err := ctx.Err(); err != nil {
				return err
			}
			// A LimitedReader of an *os.File lets os.File.ReadFrom use
			// copy_file_range when w is a file.
			want := min(end-cur, copyChunk)
			n, err := io.Copy(w, &io.LimitedReader{R: iso.f, N: want})
			written += n
			cur += n
			if err != nil {
				return err
			}
			if n != want {
				return io.ErrUnexpectedEOF
			}
		}
		return nil
	}
	for _, r := range iso.regions() {
		if err := copyTo(r.off); err != nil {
			return written, fmt.Errorf("copying %s: %w", iso.Path, err)
		}
		n, err := w.Write(r.data)
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("writing modified area: %w", err)
		}
		cur += int64(len(r.data))
	}
	if err := copyTo(iso.Size); err != nil {
		return written, fmt.Errorf("copying %s: %w", iso.Path, err)
	}
	return written, nil
}

// SaveAs writes a copy of the ISO with the staged edits to out. The copy is
// written under a temporary name in out's directory and linked into place;
// an existing out is not replaced (as coreos-installer).
func (iso *ISO) SaveAs(ctx context.Context, out string) (err error) {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("writing %s: %w", out, os.ErrExist)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".scos-builder-iso-*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	if _, err := iso.Stream(ctx, tmp); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Link(tmp.Name(), out); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		// Filesystems without hard links: rename (the Lstat above guards
		// against replacing a file in the common case).
		if err := os.Rename(tmp.Name(), out); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
	}
	return nil
}
