package liveiso

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// requiredFiles are the primary-tree files a current live ISO has and that
// coreos-installer, assisted-image-service or the live initramfs look for.
var requiredFiles = []string{
	igninfoPath, kargsPath, featuresPath, "COREOS/MINISO.DAT",
	"IMAGES/PXEBOOT/VMLINUZ", "IMAGES/PXEBOOT/INITRD.IMG", "IMAGES/PXEBOOT/ROOTFS.IMG",
}

// volumeIDPrefixes are the volume ID prefixes assisted-image-service accepts.
var volumeIDPrefixes = []string{"rhcos-", "fedora-coreos-", "scos-"}

const kargsAreaMarker = "# COREOS_KARG_EMBED_AREA\n"

// Verify checks that the ISO is a pristine, current CoreOS live ISO as a
// build should produce it: the files of a current layout exist under their
// primary names, the volume ID has a prefix assisted-image-service accepts
// and appears as coreos.liveiso= in the default kargs, the Ignition area is
// empty, the kargs are the default, and each '#'-padded karg area is
// followed by the "# COREOS_KARG_EMBED_AREA" line that assisted-image-service
// searches for. It reports every problem found.
func (iso *ISO) Verify() error {
	var errs []error
	for _, p := range requiredFiles {
		if _, err := iso.fs.lookupFile(p); err != nil {
			errs = append(errs, fmt.Errorf("looking up %s: %w", p, err))
		}
	}
	prefixed := false
	for _, p := range volumeIDPrefixes {
		prefixed = prefixed || strings.HasPrefix(iso.VolumeID, p)
	}
	if !prefixed {
		errs = append(errs, fmt.Errorf("volume ID %q does not start with one of %s", iso.VolumeID, strings.Join(volumeIDPrefixes, ", ")))
	}
	if !iso.initrd.Empty() {
		errs = append(errs, fmt.Errorf("the Ignition embed area is not empty: %s", strings.Join(iso.initrd.Paths(), ", ")))
	}
	if k := iso.Kargs; k == nil {
		errs = append(errs, errors.New("the ISO has no karg embed areas"))
	} else {
		if k.Current != k.Default {
			errs = append(errs, fmt.Errorf("kargs %q differ from the default %q", k.Current, k.Default))
		}
		if !strings.Contains(" "+k.Default+" ", " coreos.liveiso="+iso.VolumeID+" ") {
			errs = append(errs, fmt.Errorf("default kargs %q lack coreos.liveiso=%s", k.Default, iso.VolumeID))
		}
		for _, a := range k.Areas {
			if a.Pad != "#" {
				continue
			}
			after, err := iso.readArea(a.Offset+int64(k.Size), len(kargsAreaMarker))
			if err != nil || !bytes.Equal(after, []byte(kargsAreaMarker)) {
				errs = append(errs, fmt.Errorf("karg area in %s is not followed by %q", a.File, strings.TrimSpace(kargsAreaMarker)))
			}
		}
	}
	return errors.Join(errs...)
}
