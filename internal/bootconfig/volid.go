package bootconfig

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Label and os-release keys that name the OS for the volume ID.
const (
	LabelOSName       = "com.coreos.osname"
	LabelImageVersion = "org.opencontainers.image.version"
)

// volumeIDPrefixes are the prefixes assisted-image-service (the agent
// installer's ISO store) accepts; other volume IDs get a warning.
var volumeIDPrefixes = []string{"scos-", "rhcos-", "fedora-coreos-"}

// maxVolumeID is the size of the ISO 9660 volume identifier field.
const maxVolumeID = 32

// ParseOSRelease parses os-release(5) text: KEY=value lines, values
// optionally quoted with shell quoting. Malformed lines are skipped, as
// systemd does.
func ParseOSRelease(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			if v[0] == '"' {
				if u, err := strconv.Unquote(v); err == nil {
					v = u
				} else {
					v = v[1 : len(v)-1]
				}
			} else {
				v = v[1 : len(v)-1]
			}
		}
		out[k] = v
	}
	return out
}

// ResolveName picks the OS name and version that make up the volume ID,
// the way coreos-assembler does: the osname from the com.coreos.osname
// image label, else os-release ID (plus "-" VARIANT_ID), else fallback
// (the recipe's name); the version from os-release OSTREE_VERSION, else the
// org.opencontainers.image.version label.
func ResolveName(labels, osRelease map[string]string, fallback string) (osname, version string, err error) {
	osname = labels[LabelOSName]
	if osname == "" && osRelease["ID"] != "" {
		osname = osRelease["ID"]
		if v := osRelease["VARIANT_ID"]; v != "" {
			osname += "-" + v
		}
	}
	if osname == "" {
		osname = fallback
	}
	if osname == "" {
		return "", "", fmt.Errorf("resolving OS name: no %s label, no os-release ID and no recipe name", LabelOSName)
	}
	version = osRelease["OSTREE_VERSION"]
	if version == "" {
		version = labels[LabelImageVersion]
	}
	if version == "" {
		return "", "", fmt.Errorf("resolving OS version: no OSTREE_VERSION in os-release and no %s label", LabelImageVersion)
	}
	return osname, version, nil
}

// VolumeID returns the ISO volume ID ((osname-version)[:32]) and volume set
// ID (osname-version, untruncated). The same string becomes the
// coreos.liveiso= karg, the ESP stub's search label and the initramfs's
// /dev/disk/by-label path, so characters udev would escape are refused.
// warning is non-empty when the agent installer would reject the ID.
func VolumeID(osname, version string) (volid, volset, warning string, err error) {
	if osname == "" || version == "" {
		return "", "", "", fmt.Errorf("making volume ID: OS name %q and version %q must both be set", osname, version)
	}
	volset = osname + "-" + version
	for _, r := range volset {
		if r <= ' ' || r > '~' || r == '/' || r == '\\' || r == '"' {
			return "", "", "", fmt.Errorf("making volume ID from %q: character %q is not allowed (use printable ASCII without space, slash, backslash or quote)", volset, r)
		}
	}
	volid = volset
	if len(volid) > maxVolumeID {
		volid = volid[:maxVolumeID]
	}
	ok := false
	for _, p := range volumeIDPrefixes {
		if strings.HasPrefix(volid, p) {
			ok = true
		}
	}
	if !ok {
		warning = fmt.Sprintf("volume ID %q does not start with %s: the agent installer (assisted-image-service) will reject this ISO",
			volid, strings.Join(volumeIDPrefixes, ", "))
	}
	return volid, volset, warning, nil
}
