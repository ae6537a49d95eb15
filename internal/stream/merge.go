package stream

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Input is one stream to merge; Name (usually its file name) is used in
// error messages.
type Input struct {
	Name   string
	Stream *Stream
}

// Merge combines streams of the same name, typically one per architecture
// from separate build jobs, into one. The same entry may appear in several
// inputs only with identical content: a platform with two releases, a
// format or cloud image with two different values, or two stream names is
// a conflict, and all conflicts are reported. metadata comes from the input
// with the latest last-modified.
func Merge(inputs ...Input) (*Stream, error) {
	if len(inputs) == 0 {
		return nil, errors.New("merging streams: no input")
	}
	for i := range inputs {
		if inputs[i].Name == "" {
			inputs[i].Name = fmt.Sprintf("input %d", i+1)
		}
		if inputs[i].Stream == nil {
			return nil, fmt.Errorf("merging streams: %s is empty", inputs[i].Name)
		}
	}
	out := &Stream{Stream: inputs[0].Stream.Stream, Architectures: map[string]Arch{}}
	var errs []error
	conflict := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	// origin remembers which input contributed an entry, for messages.
	origin := map[string]string{}
	var newest time.Time
	for i, in := range inputs {
		s := in.Stream
		if s.Stream != out.Stream {
			conflict("stream name %q in %s differs from %q in %s", s.Stream, in.Name, out.Stream, inputs[0].Name)
		}
		t, err := time.Parse(time.RFC3339, s.Metadata.LastModified)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: metadata.last-modified %q is not RFC 3339", in.Name, s.Metadata.LastModified))
		} else if i == 0 || t.After(newest) {
			newest = t
			out.Metadata = s.Metadata
		}
		for _, archName := range sortedKeys(s.Architectures) {
			src := s.Architectures[archName]
			dst, seen := out.Architectures[archName]
			if !seen {
				dst = Arch{Artifacts: map[string]PlatformArtifacts{}}
			}
			for _, plat := range sortedKeys(src.Artifacts) {
				sp := src.Artifacts[plat]
				key := archName + "." + plat
				dp, ok := dst.Artifacts[plat]
				if !ok {
					dp = PlatformArtifacts{Release: sp.Release, Formats: map[string]ImageFormat{}}
					origin[key] = in.Name
				} else if dp.Release != sp.Release {
					conflict("conflict at architectures.%s.artifacts.%s.release: %q in %s, %q in %s", archName, plat, dp.Release, origin[key], sp.Release, in.Name)
					continue
				}
				for _, f := range sortedKeys(sp.Formats) {
					sf := copyFormat(sp.Formats[f])
					fkey := key + "." + f
					if df, ok := dp.Formats[f]; ok {
						if !reflect.DeepEqual(df, sf) {
							conflict("conflict at architectures.%s.artifacts.%s.formats.%s: %s and %s differ", archName, plat, f, origin[fkey], in.Name)
						}
						continue
					}
					dp.Formats[f] = sf
					origin[fkey] = in.Name
				}
				dst.Artifacts[plat] = dp
			}
			mergeField := func(field string, d, s any) any {
				if isNil(s) {
					return d
				}
				fkey := archName + "." + field
				if isNil(d) {
					origin[fkey] = in.Name
					return s
				}
				if !reflect.DeepEqual(d, s) {
					conflict("conflict at architectures.%s.%s: %s and %s differ", archName, field, origin[fkey], in.Name)
				}
				return d
			}
			if src.Images != nil {
				if dst.Images == nil {
					dst.Images = &Images{}
				}
				im := dst.Images
				im.Aliyun = mergeField("images.aliyun", im.Aliyun, src.Images.Aliyun).(*ReplicatedImage)
				im.Aws = mergeField("images.aws", im.Aws, src.Images.Aws).(*ReplicatedImage)
				im.Gcp = mergeField("images.gcp", im.Gcp, src.Images.Gcp).(*GcpImage)
				im.Ibmcloud = mergeField("images.ibmcloud", im.Ibmcloud, src.Images.Ibmcloud).(*ReplicatedObject)
				im.KubeVirt = mergeField("images.kubevirt", im.KubeVirt, src.Images.KubeVirt).(*ContainerImage)
				im.PowerVS = mergeField("images.powervs", im.PowerVS, src.Images.PowerVS).(*ReplicatedObject)
			}
			if src.RHELCoreOSExtensions != nil {
				if dst.RHELCoreOSExtensions == nil {
					dst.RHELCoreOSExtensions = &Extensions{}
				}
				ex := dst.RHELCoreOSExtensions
				ex.AwsWinLi = mergeField("rhel-coreos-extensions.aws-winli", ex.AwsWinLi, src.RHELCoreOSExtensions.AwsWinLi).(*ReplicatedImage)
				ex.AzureDisk = mergeField("rhel-coreos-extensions.azure-disk", ex.AzureDisk, src.RHELCoreOSExtensions.AzureDisk).(*AzureDisk)
				ex.Marketplace = mergeField("rhel-coreos-extensions.marketplace", ex.Marketplace, src.RHELCoreOSExtensions.Marketplace).(*Marketplace)
			}
			out.Architectures[archName] = dst
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("merging streams: %w", errors.Join(errs...))
	}
	return out, nil
}

// copyFormat copies the artifacts so the merged stream shares no pointers
// with its inputs.
func copyFormat(f ImageFormat) ImageFormat {
	cp := func(a *Artifact) *Artifact {
		if a == nil {
			return nil
		}
		c := *a
		return &c
	}
	return ImageFormat{Disk: cp(f.Disk), Kernel: cp(f.Kernel), Initramfs: cp(f.Initramfs), Rootfs: cp(f.Rootfs)}
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
