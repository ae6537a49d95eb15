// Package recipes holds the built-in build recipes (scos, fcos alias okd,
// rhcos): which payload tags name the OS image, the OS name and artifact
// prefix, and the defaults an image may override through its
// usr/share/coreos-assembler/image.json. The Go struct is the source of
// truth; recipe.schema.json is generated from it and kept in sync by a test.
package recipes

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

//go:embed *.yaml
var files embed.FS

// Recipe describes how to build live images for one OS family.
type Recipe struct {
	// Name is the recipe's name (--recipe).
	Name string `yaml:"name" json:"name"`
	// Aliases are other names for the recipe.
	Aliases []string `yaml:"aliases,omitempty" json:"aliases,omitempty"`
	// Description is a one-line summary.
	Description string `yaml:"description" json:"description"`
	// OSTags are the release payload tags naming the OS image, in lookup order.
	OSTags []string `yaml:"os-tags" json:"os-tags"`
	// OSName is the stateroot and volume ID prefix when the image has no
	// com.coreos.osname label.
	OSName string `yaml:"osname" json:"osname"`
	// ArtifactPrefix starts every artifact name (<prefix>-<release>-live-iso.<arch>.iso).
	ArtifactPrefix string `yaml:"artifact-prefix" json:"artifact-prefix"`
	// Stream is the stream name written into the stream JSON.
	Stream string `yaml:"stream" json:"stream"`
	// Kargs come first on the live kernel command line (the metal BLS
	// kernel options before the image's extra-kargs).
	Kargs []string `yaml:"kargs,omitempty" json:"kargs,omitempty"`
	// Defaults apply where the image's image.json says nothing.
	Defaults ImageDefaults `yaml:"defaults" json:"defaults"`
}

// ImageDefaults mirrors the keys of usr/share/coreos-assembler/image.json
// that the live build reads.
type ImageDefaults struct {
	// LiveRootfsFSType is squashfs or erofs.
	LiveRootfsFSType string `yaml:"live-rootfs-fstype" json:"live-rootfs-fstype"`
	// LiveRootfsFSOptions are mksquashfs / mkfs.erofs options.
	LiveRootfsFSOptions string `yaml:"live-rootfs-fsoptions" json:"live-rootfs-fsoptions"`
	// ExtraKargs are appended after the recipe's kargs.
	ExtraKargs []string `yaml:"extra-kargs,omitempty" json:"extra-kargs,omitempty"`
}

// FSTypes are the valid live rootfs filesystem types.
var FSTypes = []string{"squashfs", "erofs"}

// Validate checks a recipe for completeness.
func (r *Recipe) Validate() error {
	var errs []error
	if r.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if len(r.OSTags) == 0 {
		errs = append(errs, errors.New("os-tags is empty"))
	}
	if r.OSName == "" {
		errs = append(errs, errors.New("osname is empty"))
	}
	if r.ArtifactPrefix == "" {
		errs = append(errs, errors.New("artifact-prefix is empty"))
	}
	if r.Stream == "" {
		errs = append(errs, errors.New("stream is empty"))
	}
	if !contains(FSTypes, r.Defaults.LiveRootfsFSType) {
		errs = append(errs, fmt.Errorf("defaults.live-rootfs-fstype %q is not one of %s", r.Defaults.LiveRootfsFSType, strings.Join(FSTypes, ", ")))
	}
	return errors.Join(errs...)
}

// Parse decodes one recipe strictly: unknown keys are errors.
func Parse(data []byte) (*Recipe, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var r Recipe
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decoding recipe: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("decoding recipe: more than one YAML document")
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	return &r, nil
}

// All returns the built-in recipes sorted by name.
func All() ([]*Recipe, error) {
	entries, err := files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	var out []*Recipe
	for _, e := range entries {
		data, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		r, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("loading built-in recipe %s: %w", e.Name(), err)
		}
		if r.Name+".yaml" != e.Name() {
			return nil, fmt.Errorf("built-in recipe %s is named %q", e.Name(), r.Name)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Names lists the valid recipe names and aliases.
func Names() []string {
	all, err := All()
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range all {
		names = append(names, r.Name)
		names = append(names, r.Aliases...)
	}
	sort.Strings(names)
	return names
}

// Get returns the recipe with the given name or alias.
func Get(name string) (*Recipe, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.Name == name || contains(r.Aliases, name) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("unknown recipe %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// ForOSTag returns the recipe whose os-tags include the payload tag.
func ForOSTag(tag string) (*Recipe, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if contains(r.OSTags, tag) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no recipe knows the payload tag %q; pass --recipe (valid: %s)", tag, strings.Join(Names(), ", "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
