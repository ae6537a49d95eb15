package publish

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/okd-project/scos-builder/internal/stream"
)

// Build is one build output directory, checked against the input contract.
type Build struct {
	// Dir is the output directory.
	Dir string
	// StreamFile is the path of its stream file (<prefix>.json).
	StreamFile string
	// Stream is its stream, with exactly one architecture.
	Stream *stream.Stream
	// Arch is that architecture (RPM name) and GoArch its Go/OCI name.
	Arch, GoArch string
	// ISOFile is the path of the live ISO, ISO its stream entry and
	// Release the metal release.
	ISOFile string
	ISO     stream.Artifact
	Release string
}

// LoadBuild reads the build output directory dir: finds its stream file,
// checks it describes one architecture with a metal ISO, and verifies the
// ISO file's sha256 against the stream.
func LoadBuild(dir string) (*Build, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("loading build %s: %w", dir, err)
	}
	sort.Strings(matches)
	var found []*stream.Stream
	var files []string
	var parseErrs []string
	for _, m := range matches {
		s, err := stream.ReadFile(m)
		if err != nil {
			parseErrs = append(parseErrs, err.Error())
			continue
		}
		found = append(found, s)
		files = append(files, m)
	}
	switch len(found) {
	case 0:
		msg := fmt.Sprintf("loading build %s: no stream file (<prefix>.json) found", dir)
		if len(parseErrs) > 0 {
			msg += ": " + strings.Join(parseErrs, "; ")
		}
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("loading build: %w", err)
		}
		return nil, errors.New(msg)
	case 1:
	default:
		return nil, fmt.Errorf("loading build %s: several stream files (%s); an output directory holds one build", dir, strings.Join(baseNames(files), ", "))
	}
	s := found[0]
	b := &Build{Dir: dir, StreamFile: files[0], Stream: s}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("loading build %s: %w", dir, err)
	}
	if len(s.Architectures) != 1 {
		var archs []string
		for a := range s.Architectures {
			archs = append(archs, a)
		}
		sort.Strings(archs)
		return nil, fmt.Errorf("loading build %s: stream %s describes %d architectures (%s), want the one this build is for", dir, filepath.Base(b.StreamFile), len(archs), strings.Join(archs, ", "))
	}
	for a := range s.Architectures {
		b.Arch = a
	}
	if b.GoArch, err = stream.GoArch(b.Arch); err != nil {
		return nil, fmt.Errorf("loading build %s: %w", dir, err)
	}
	if b.ISO, b.Release, err = s.LiveISO(b.Arch); err != nil {
		return nil, fmt.Errorf("loading build %s: %w", dir, err)
	}
	name := path.Base(b.ISO.Location)
	if name == "" || name == "." || name == "/" {
		return nil, fmt.Errorf("loading build %s: ISO location %q has no file name", dir, b.ISO.Location)
	}
	b.ISOFile = filepath.Join(dir, name)
	sum, err := stream.FileSHA256(b.ISOFile)
	if err != nil {
		return nil, fmt.Errorf("loading build %s: %w", dir, err)
	}
	if sum != b.ISO.Sha256 {
		return nil, fmt.Errorf("loading build %s: %s has sha256 %s but the stream says %s", dir, name, sum, b.ISO.Sha256)
	}
	return b, nil
}

// LoadBuilds loads several build directories and checks that they are for
// different architectures.
func LoadBuilds(dirs []string) ([]*Build, error) {
	if len(dirs) == 0 {
		return nil, errors.New("loading builds: no output directory given")
	}
	var builds []*Build
	seen := map[string]string{}
	for _, d := range dirs {
		b, err := LoadBuild(d)
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[b.Arch]; ok {
			return nil, fmt.Errorf("loading builds: %s and %s are both for %s", prev, d, b.Arch)
		}
		seen[b.Arch] = d
		builds = append(builds, b)
	}
	// Architecture order, so the index does not depend on argument order.
	sort.Slice(builds, func(i, j int) bool { return builds[i].Arch < builds[j].Arch })
	return builds, nil
}

// mergedStream is the stream of all builds together.
func mergedStream(builds []*Build) (*stream.Stream, error) {
	inputs := make([]stream.Input, len(builds))
	for i, b := range builds {
		inputs[i] = stream.Input{Name: b.StreamFile, Stream: b.Stream}
	}
	return stream.Merge(inputs...)
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}
