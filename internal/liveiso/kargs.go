package liveiso

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// KargsArea is one copy of the kernel arguments inside a bootloader config
// (or, on s390x, inside cdboot.img).
type KargsArea struct {
	File       string `json:"file"`        // path as given in kargs.json ("" for the legacy header)
	FileOffset int64  `json:"file_offset"` // offset inside File
	Offset     int64  `json:"offset"`      // absolute offset in the ISO
	Pad        string `json:"pad"`         // fills the area after the kargs
	End        string `json:"end"`         // terminates the kargs
}

// KargsAreas are the kernel argument embed areas of an ISO: every area holds
// the same kargs, Size bytes long including End and padding.
type KargsAreas struct {
	Default string      `json:"default"`
	Current string      `json:"current"`
	Size    int         `json:"size"`
	Areas   []KargsArea `json:"areas"`
	// Legacy is set when the areas were found through the coreKarg header in
	// the system area (ISOs from 2021 without coreos/kargs.json).
	Legacy bool `json:"legacy,omitempty"`
}

// maxKargsSize is coreos-installer's sanity limit on a karg area.
const maxKargsSize = 2048

// parseKargs decodes an area's bytes as coreos-installer does: strip the
// padding, then the terminator, then surrounding white space.
func parseKargs(b []byte, pad, end byte) (string, error) {
	if !utf8.Valid(b) {
		return "", errors.New("invalid UTF-8 in karg area")
	}
	s := strings.TrimRight(string(b), string(pad))
	s = strings.TrimRight(s, string(end))
	return strings.TrimSpace(s), nil
}

// formatKargs encodes kargs for an area of the given size.
func formatKargs(kargs string, size int, pad, end byte) ([]byte, error) {
	k := strings.TrimSpace(kargs)
	if len(k) >= size {
		return nil, fmt.Errorf("kargs too large for area: %d bytes with the terminator, the area holds %d", len(k)+1, size)
	}
	b := make([]byte, size)
	copy(b, k)
	b[len(k)] = end
	for i := len(k) + 1; i < size; i++ {
		b[i] = pad
	}
	return b, nil
}

// KargsEdit is a set of kernel argument changes, applied as
// coreos-installer's `iso kargs modify` does: plain substring edits on the
// space-separated string, deletions first, then appends, then replacements.
type KargsEdit struct {
	Append  []string
	Delete  []string
	Replace []string // KEY=OLD=NEW
}

var replaceRE = regexp.MustCompile(`^([^=]+)=([^=]+)=([^=]+)$`)

// Apply returns current with the edits applied.
func (e KargsEdit) Apply(current string) (string, error) {
	s := " " + current + " "
	for _, k := range e.Delete {
		s = strings.ReplaceAll(s, " "+strings.TrimSpace(k)+" ", " ")
	}
	for _, k := range e.Append {
		s += strings.TrimSpace(k) + " "
	}
	for _, k := range e.Replace {
		m := replaceRE.FindStringSubmatch(k)
		if m == nil {
			return "", fmt.Errorf("replacing karg %q: format should be KEY=OLD=NEW", k)
		}
		s = strings.ReplaceAll(s, " "+m[1]+"="+m[2]+" ", " "+m[1]+"="+m[3]+" ")
	}
	return strings.TrimSpace(s), nil
}
