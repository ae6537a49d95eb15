package bootconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// KernelArgsPlaceholder is replaced by the live kernel arguments in every
// template file.
const KernelArgsPlaceholder = "@@KERNEL-ARGS@@"

// embedAreaMarker closes a karg embed area: a run of '#' ends in this
// comment, whose leading '#' stays outside the area.
const embedAreaMarker = "# COREOS_KARG_EMBED_AREA\n"

// maxKargsAreaSize is the largest area coreos-installer accepts.
const maxKargsAreaSize = 2048

// liveExcludedKargs are dropped from the image's kernel arguments, as
// coreos-assembler does: the live ISO has no serial console by default, its
// templates hard-code the Ignition platform, and the initramfs finds the
// ostree deployment itself.
var liveExcludedKargs = map[string]bool{
	"$ignition_firstboot":  true,
	"console":              true,
	"ignition.platform.id": true,
	"ostree":               true,
}

// KargsFile locates one karg embed area (coreos/kargs.json "files").
type KargsFile struct {
	End    string `json:"end"`
	Offset int    `json:"offset"`
	Pad    string `json:"pad"`
	Path   string `json:"path"`
}

// KargsJSON is coreos/kargs.json: the default kernel arguments, where the
// embed areas are and how long each is.
type KargsJSON struct {
	Default string      `json:"default"`
	Files   []KargsFile `json:"files"`
	Size    int         `json:"size"`
}

// Marshal encodes the file as coreos-assembler writes it: indent 2, keys
// sorted, trailing newline.
func (k KargsJSON) Marshal() ([]byte, error) {
	return marshalJSON(k)
}

func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LiveKargs joins the live kernel arguments: the image's extra kargs (minus
// those the live ISO must not carry), coreos.liveiso=<volid>, then the
// recipe's additions.
func LiveKargs(imageKargs []string, volid string, add []string) (string, error) {
	var out []string
	for _, k := range imageKargs {
		name, _, _ := strings.Cut(k, "=")
		if k == "" || liveExcludedKargs[name] {
			continue
		}
		out = append(out, k)
	}
	out = append(out, "coreos.liveiso="+volid)
	out = append(out, add...)
	for _, k := range out {
		if strings.TrimSpace(k) == "" || strings.ContainsAny(k, "#\n\r") {
			return "", fmt.Errorf("building kernel arguments: %q is empty or contains a newline or '#'", k)
		}
	}
	return strings.Join(out, " "), nil
}

// templateFile is one file of a live template set.
type templateFile struct {
	path string // slash-separated, relative to the template root
	data []byte
	exec bool
}

// renderTemplates substitutes kargs into every file and computes the karg
// embed areas exactly as coreos-assembler does: an area starts where the
// placeholder was and runs to (not including) the last '#' before
// "# COREOS_KARG_EMBED_AREA\n"; every file must give the same default
// command line and the same area size.
func renderTemplates(files []templateFile, kargs string) ([]templateFile, KargsJSON, error) {
	var kj KargsJSON
	var cmdline string
	out := make([]templateFile, 0, len(files))
	for _, f := range files {
		start := bytes.Index(f.data, []byte(KernelArgsPlaceholder))
		if start < 0 {
			out = append(out, f)
			continue
		}
		buf := bytes.ReplaceAll(f.data, []byte(KernelArgsPlaceholder), []byte(kargs))
		out = append(out, templateFile{path: f.path, data: buf, exec: f.exec})
		end, runStart, ok := findEmbedAreaEnd(buf)
		if !ok {
			continue // e.g. zipl.prm: kargs but no embed area
		}
		if runStart < start+len(kargs) {
			return nil, kj, fmt.Errorf("computing karg embed area in %s: the embed area marker comes before the kernel arguments end", f.path)
		}
		fileKargs := string(buf[start:runStart])
		if cmdline == "" {
			cmdline = fileKargs
		} else if cmdline != fileKargs {
			return nil, kj, fmt.Errorf("computing karg embed areas: default command line in %s is %q, other files have %q", f.path, fileKargs, cmdline)
		}
		length := end - start
		if kj.Size == 0 {
			kj.Size = length
		} else if kj.Size != length {
			return nil, kj, fmt.Errorf("computing karg embed areas: %s has an area of %d bytes, other files have %d", f.path, length, kj.Size)
		}
		kj.Files = append(kj.Files, KargsFile{End: "\n", Offset: start, Pad: "#", Path: f.path})
	}
	if kj.Size > 0 {
		if kj.Size <= len(cmdline) {
			return nil, kj, fmt.Errorf("computing karg embed areas: area of %d bytes leaves no room after the %d-byte default command line", kj.Size, len(cmdline))
		}
		if kj.Size > maxKargsAreaSize {
			return nil, kj, fmt.Errorf("computing karg embed areas: area of %d bytes exceeds coreos-installer's limit of %d", kj.Size, maxKargsAreaSize)
		}
		kj.Default = strings.TrimSpace(cmdline)
	}
	return out, kj, nil
}

// findEmbedAreaEnd finds the leftmost match of the regexp
// (#+)# COREOS_KARG_EMBED_AREA\n and returns the end of group 1 (where the
// area ends) and the start of the match (where the '#' run begins).
func findEmbedAreaEnd(buf []byte) (end, runStart int, ok bool) {
	from := 0
	for {
		i := bytes.Index(buf[from:], []byte(embedAreaMarker))
		if i < 0 {
			return 0, 0, false
		}
		p := from + i
		if p > 0 && buf[p-1] == '#' {
			s := p - 1
			for s > 0 && buf[s-1] == '#' {
				s--
			}
			return p, s, true
		}
		from = p + 1
	}
}

// sortKargsFiles orders the areas by path, as coreos-assembler does.
func sortKargsFiles(files []KargsFile) {
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
}
