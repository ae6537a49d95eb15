package isomaster

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/bootconfig"
)

func TestArgs(t *testing.T) {
	base := Options{Arch: "x86_64", VolumeID: "scos-9.0.20260101-0", VolumeSet: "scos-9.0.20260101-0", IsohybridMBR: "/usr/lib/ISOLINUX/isohdpfx.bin", SourceDateEpoch: 1700000000}
	common := []string{"-volume_date", "all_file_dates", "=1700000000", "-as", "mkisofs", "-o", "out.iso",
		"-V", "scos-9.0.20260101-0", "-volset", "scos-9.0.20260101-0", "-sysid", "LINUX", "-rational-rock", "-J", "-joliet-long"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	bios := []string{"-isohybrid-mbr", "/usr/lib/ISOLINUX/isohdpfx.bin", "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
		"-no-emul-boot", "-boot-load-size", "4", "-boot-info-table"}
	tests := []struct {
		name   string
		mod    func(*Options)
		layout Layout
		want   []string
		err    string
		is     error
	}{
		{name: "x86_64 BIOS and UEFI", layout: Layout{BIOS: true, UEFI: true},
			want: cat(common, bios, []string{"-eltorito-alt-boot", "-e", "images/efiboot.img", "-no-emul-boot", "-isohybrid-gpt-basdat", "tree"})},
		{name: "x86_64 BIOS only", layout: Layout{BIOS: true}, want: cat(common, bios, []string{"tree"})},
		{name: "aarch64", mod: func(o *Options) { o.Arch = "aarch64"; o.IsohybridMBR = "" }, layout: Layout{UEFI: true},
			want: cat(common, []string{"-c", "boot.catalog", "-e", "images/efiboot.img", "-no-emul-boot", "tree"})},
		{name: "volume set defaults to volume ID", mod: func(o *Options) { o.VolumeSet = "" }, layout: Layout{BIOS: true}, want: cat(common, bios, []string{"tree"})},
		{name: "ppc64le", mod: func(o *Options) { o.Arch = "ppc64le" }, layout: Layout{UEFI: true}, err: "not supported yet", is: bootconfig.ErrArchNotSupported},
		{name: "s390x", mod: func(o *Options) { o.Arch = "s390x" }, err: "not supported yet", is: bootconfig.ErrArchNotSupported},
		{name: "unknown arch", mod: func(o *Options) { o.Arch = "mips" }, err: "valid: x86_64, aarch64"},
		{name: "long volume ID", mod: func(o *Options) { o.VolumeID = strings.Repeat("s", 33) }, layout: Layout{BIOS: true}, err: "1 to 32 bytes"},
		{name: "x86_64 without isolinux", layout: Layout{UEFI: true}, err: "no isolinux/isolinux.bin"},
		{name: "x86_64 without MBR", mod: func(o *Options) { o.IsohybridMBR = "" }, layout: Layout{BIOS: true, UEFI: true}, err: "isohdpfx.bin"},
		{name: "aarch64 without ESP", mod: func(o *Options) { o.Arch = "aarch64" }, layout: Layout{}, err: "no images/efiboot.img"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			if tt.mod != nil {
				tt.mod(&o)
			}
			got, err := Args(o, tt.layout, "tree", "out.iso")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want %q", err, tt.err)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("error %v is not %v", err, tt.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Args =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
