package bootconfig

import (
	"strings"
	"testing"
)

func TestVolumeID(t *testing.T) {
	tests := []struct {
		osname, version string
		volid, volset   string
		warn            bool
		err             string
	}{
		{osname: "fedora-coreos", version: "38.20230718.dev.0", volid: "fedora-coreos-38.20230718.dev.0", volset: "fedora-coreos-38.20230718.dev.0"},
		{osname: "rhcos", version: "9.6.20250523-0", volid: "rhcos-9.6.20250523-0", volset: "rhcos-9.6.20250523-0"},
		{osname: "scos", version: "9.0.20250510-0", volid: "scos-9.0.20250510-0", volset: "scos-9.0.20250510-0"},
		// Truncated to 32 bytes; the volume set keeps the whole name.
		{osname: "scos", version: "4.19.0-okd-scos.1-9.0.20250510-0", volid: "scos-4.19.0-okd-scos.1-9.0.20250", volset: "scos-4.19.0-okd-scos.1-9.0.20250510-0"},
		{osname: "debian", version: "12", volid: "debian-12", volset: "debian-12", warn: true},
		{osname: "scos", version: "9 beta", err: "not allowed"},
		{osname: "scos", version: "a/b", err: "not allowed"},
		{osname: "", version: "1", err: "must both be set"},
	}
	for _, tt := range tests {
		volid, volset, warn, err := VolumeID(tt.osname, tt.version)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("VolumeID(%q, %q) error = %v, want %q", tt.osname, tt.version, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("VolumeID(%q, %q): %v", tt.osname, tt.version, err)
			continue
		}
		if volid != tt.volid || volset != tt.volset || (warn != "") != tt.warn {
			t.Errorf("VolumeID(%q, %q) = %q, %q, warning %q; want %q, %q, warning %v", tt.osname, tt.version, volid, volset, warn, tt.volid, tt.volset, tt.warn)
		}
		if len(volid) > 32 {
			t.Errorf("volume ID %q longer than 32 bytes", volid)
		}
	}
}

func TestResolveName(t *testing.T) {
	osr := ParseOSRelease([]byte("# comment\nID=centos\nVARIANT_ID=coreos\nOSTREE_VERSION='9.0.20250510-0'\nNAME=\"CentOS Stream CoreOS\"\nbroken line\n"))
	if osr["NAME"] != "CentOS Stream CoreOS" || osr["OSTREE_VERSION"] != "9.0.20250510-0" {
		t.Fatalf("ParseOSRelease = %v", osr)
	}
	tests := []struct {
		labels, osr          map[string]string
		fallback             string
		osname, version, err string
	}{
		{labels: map[string]string{LabelOSName: "scos"}, osr: osr, osname: "scos", version: "9.0.20250510-0"},
		{labels: nil, osr: osr, osname: "centos-coreos", version: "9.0.20250510-0"},
		{labels: map[string]string{LabelImageVersion: "418.9"}, osr: map[string]string{}, fallback: "scos", osname: "scos", version: "418.9"},
		{labels: nil, osr: map[string]string{"ID": "x"}, err: "no OSTREE_VERSION"},
		{labels: nil, osr: map[string]string{"OSTREE_VERSION": "1"}, err: "no recipe name"},
	}
	for i, tt := range tests {
		osname, version, err := ResolveName(tt.labels, tt.osr, tt.fallback)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%d: error = %v, want %q", i, err, tt.err)
			}
			continue
		}
		if err != nil || osname != tt.osname || version != tt.version {
			t.Errorf("%d: ResolveName = %q, %q, %v; want %q, %q", i, osname, version, err, tt.osname, tt.version)
		}
	}
}

func TestLiveKargs(t *testing.T) {
	got, err := LiveKargs([]string{"mitigations=auto,nosmt", "console=ttyS0", "$ignition_firstboot", "ostree=/x", "ignition.platform.id=qemu", "rw"}, "scos-1", []string{"quiet"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "mitigations=auto,nosmt rw coreos.liveiso=scos-1 quiet"; got != want {
		t.Errorf("LiveKargs = %q, want %q", got, want)
	}
	if _, err := LiveKargs(nil, "scos-1", []string{"a#b"}); err == nil {
		t.Error("LiveKargs accepted a karg with '#'")
	}
}
