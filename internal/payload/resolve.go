package payload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Label on OS images (io.coreos.oscontainerimage.osstream=<stream>); the
// extensions image carries io.coreos.osextensionscontainerimage.osstream.
const OSStreamLabel = "io.coreos.oscontainerimage.osstream"

// MachineOSImagesTag is the tag of the image carrying the boot ISOs.
const MachineOSImagesTag = "machine-os-images"

// placeholderHost is what unreplaced pull specs in operator manifests use.
const placeholderHost = "placeholder.url.oc.will.replace.this.org"

// Source is the image access Resolve needs; registry.Client implements it.
type Source interface {
	// LastLayer returns the last layer of image ref (for the requested
	// architecture) as an uncompressed tar stream, and ref's pull spec by
	// digest ("" when ref is not a registry image).
	LastLayer(ctx context.Context, ref string) (io.ReadCloser, string, error)
	// Labels returns the config labels of image ref and its pull spec by
	// digest.
	Labels(ctx context.Context, ref string) (map[string]string, string, error)
}

// RecipeTags is one recipe's OS image tags, most preferred first.
type RecipeTags struct {
	Recipe string
	Tags   []string
}

// DefaultRecipeTags are the OS image tags of the built-in recipes, in the
// order recipes are tried when none is given.
var DefaultRecipeTags = []RecipeTags{
	{Recipe: "scos", Tags: []string{"stream-coreos", "centos-stream-coreos-10", "centos-stream-coreos-9"}},
	{Recipe: "fcos", Tags: []string{"fedora-coreos"}},
	{Recipe: "rhcos", Tags: []string{"rhel-coreos", "rhel-coreos-10"}},
}

// Options steer Resolve.
type Options struct {
	// OSTag forces the OS image tag (--os-tag).
	OSTag string
	// Recipe is the recipe given by the user (--recipe); empty means
	// auto-detect from the OS tag found.
	Recipe string
	// Recipes are the recipes' tag lists; nil means DefaultRecipeTags.
	Recipes []RecipeTags
}

// How the OS image was found.
const (
	ByOSTag     = "os-tag"
	ByConfigMap = "osimageurl-configmap"
	ByTagList   = "recipe-tag-list"
	ByLabel     = "label-scan"
	ByMachineOS = "machine-os-component"
)

// Resolved is what a payload says about its OS image.
type Resolved struct {
	// Release is the payload reference as given; ReleaseDigestRef is its
	// pull spec by digest (when it is a registry image).
	Release          string `json:"release"`
	ReleaseDigestRef string `json:"releaseDigestRef,omitempty"`
	Version          string `json:"version"`
	OSTag            string `json:"osTag"`
	// OSImage is the OS image pull spec, by digest.
	OSImage string `json:"osImage"`
	// OSStream is the image's io.coreos.oscontainerimage.osstream label
	// when it was read, else the ConfigMap stream name.
	OSStream         string `json:"osStream,omitempty"`
	MachineOSVersion string `json:"machineOSVersion,omitempty"`
	Recipe           string `json:"recipe,omitempty"`
	// RecipeDetected is true when Recipe was derived from the OS tag.
	RecipeDetected  bool   `json:"recipeDetected"`
	MachineOSImages string `json:"machineOSImages,omitempty"`
	// FoundBy names the lookup rule that chose the OS tag.
	FoundBy string `json:"foundBy"`
	// Payload is the parsed release metadata.
	Payload *Release `json:"-"`
}

// Resolve reads release image ref through src and finds its OS image.
// The lookup order is: opts.OSTag; the osimageurl ConfigMap's default
// stream; the recipe tag list(s); a scan of candidate tags for the
// io.coreos.oscontainerimage.osstream label; the tag declaring the
// machine-os component version.
func Resolve(ctx context.Context, src Source, ref string, opts Options) (*Resolved, error) {
	rc, digestRef, err := src.LastLayer(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("reading release image %s: %w", ref, err)
	}
	rel, err := ReadRelease(rc)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("reading release image %s: %w", ref, err)
	}
	res := &Resolved{Release: ref, ReleaseDigestRef: digestRef, Version: rel.Version(), Payload: rel}
	if t, ok := rel.References.Tag(MachineOSImagesTag); ok {
		res.MachineOSImages = t.PullSpec()
	}
	recipes := opts.Recipes
	if recipes == nil {
		recipes = DefaultRecipeTags
	}
	if opts.Recipe != "" {
		recipes, err = selectRecipe(recipes, opts.Recipe)
		if err != nil {
			return nil, err
		}
	}
	tag, labels, err := findOSTag(ctx, src, rel, opts, recipes, res)
	if err != nil {
		return nil, fmt.Errorf("finding the OS image in release %s: %w", ref, err)
	}
	res.OSTag = tag.Name
	res.OSImage = tag.PullSpec()
	if !strings.Contains(res.OSImage, "@") {
		l, dref, err := src.Labels(ctx, res.OSImage)
		if err != nil {
			return nil, fmt.Errorf("resolving OS image %s (tag %s) to a digest: %w", res.OSImage, tag.Name, err)
		}
		if dref != "" {
			res.OSImage = dref
		}
		labels = l
	}
	if s := labels[OSStreamLabel]; s != "" {
		res.OSStream = s
	}
	res.MachineOSVersion = tag.Versions()["machine-os"]
	switch {
	case opts.Recipe != "":
		res.Recipe = opts.Recipe
	default:
		res.Recipe = detectRecipe(recipes, tag.Name, res.OSStream)
		res.RecipeDetected = res.Recipe != ""
	}
	return res, nil
}

func selectRecipe(recipes []RecipeTags, name string) ([]RecipeTags, error) {
	var names []string
	for _, r := range recipes {
		if r.Recipe == name {
			return []RecipeTags{r}, nil
		}
		names = append(names, r.Recipe)
	}
	return nil, fmt.Errorf("unknown recipe %q (valid: %s)", name, strings.Join(names, ", "))
}

func detectRecipe(recipes []RecipeTags, tag, stream string) string {
	for _, key := range []string{tag, stream} {
		for _, r := range recipes {
			for _, t := range r.Tags {
				if key != "" && t == key {
					return r.Recipe
				}
			}
		}
	}
	return ""
}

// osTagCandidate matches tag names that may hold an OS image (MCO's rule,
// widened to the OKD/FCOS names), extensions images excluded below.
var osTagCandidate = regexp.MustCompile(`^(rhel[\w.+-]*|stream|centos-stream[\w.+-]*|fedora)-coreos[\w.+-]*$`)

func findOSTag(ctx context.Context, src Source, rel *Release, opts Options, recipes []RecipeTags, res *Resolved) (*Tag, map[string]string, error) {
	is := rel.References
	tagsPresent := func() string { return strings.Join(is.TagNames(), ", ") }
	usable := func(name string) (*Tag, bool) {
		t, ok := is.Tag(name)
		return t, ok && t.PullSpec() != ""
	}

	// 1. --os-tag.
	if opts.OSTag != "" {
		t, ok := usable(opts.OSTag)
		if !ok {
			return nil, nil, fmt.Errorf("no image tag %q in the release (tags present: %s)", opts.OSTag, tagsPresent())
		}
		res.FoundBy = ByOSTag
		return t, nil, nil
	}

	// 2. The osimageurl ConfigMap's default stream.
	if u := rel.OSImageURL; u != nil {
		spec, stream := u.BaseOSContainerImage, ""
		if u.Streams != nil && u.Streams.Default != "" {
			stream = u.Streams.Default
			if s, ok := u.Streams.Streams[stream]; ok && s.BaseOSContainerImage != "" {
				spec = s.BaseOSContainerImage
			}
		}
		if spec != "" && !strings.Contains(spec, placeholderHost) {
			for i := range is.Spec.Tags {
				if t := &is.Spec.Tags[i]; t.PullSpec() == spec && !strings.HasSuffix(t.Name, "-extensions") {
					res.FoundBy, res.OSStream = ByConfigMap, stream
					return t, nil, nil
				}
			}
		}
		if t, ok := usable(stream); ok && stream != "" {
			res.FoundBy, res.OSStream = ByConfigMap, stream
			return t, nil, nil
		}
	}

	// 3. The recipe tag lists.
	var tried []string
	for _, r := range recipes {
		for _, name := range r.Tags {
			tried = append(tried, name)
			if t, ok := usable(name); ok {
				res.FoundBy = ByTagList
				return t, nil, nil
			}
		}
	}

	// 4. Label scan over candidate tags.
	var scanErrs []error
	for i := range is.Spec.Tags {
		t := &is.Spec.Tags[i]
		if t.PullSpec() == "" || strings.Contains(t.Name, "-extensions") {
			continue
		}
		if !osTagCandidate.MatchString(t.Name) &&
			!strings.Contains(t.Annotations["io.openshift.build.source-location"], "github.com/openshift/os") {
			continue
		}
		labels, _, err := src.Labels(ctx, t.PullSpec())
		if err != nil {
			scanErrs = append(scanErrs, fmt.Errorf("tag %s: %w", t.Name, err))
			continue
		}
		if labels[OSStreamLabel] != "" {
			res.FoundBy = ByLabel
			return t, labels, nil
		}
	}

	// 5. The machine-os component.
	if name, ok := is.ComponentTags()["machine-os"]; ok {
		if t, ok := usable(name); ok {
			res.FoundBy = ByMachineOS
			return t, nil, nil
		}
	}
	err := fmt.Errorf("no OS image tag found (tried the osimageurl ConfigMap, tags %s, the %s label and the machine-os component; tags present: %s; pass --os-tag)",
		strings.Join(tried, ", "), OSStreamLabel, tagsPresent())
	if len(scanErrs) > 0 {
		err = fmt.Errorf("%w; label scan errors: %w", err, errors.Join(scanErrs...))
	}
	return nil, nil, err
}
