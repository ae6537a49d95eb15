package qemutest

import (
	"bytes"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

func TestArgs(t *testing.T) {
	common := []string{"-machine", "pc", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "1024",
		"-nographic", "-monitor", "none", "-serial", "file:s.log", "-no-reboot", "-nic", "none"}
	tests := []struct {
		b    Boot
		want []string
		err  string
	}{
		{b: Boot{Image: "x.iso", Firmware: SeaBIOS, Media: CDROM},
			want: append(append([]string{}, common...), "-drive", "file=x.iso,media=cdrom,format=raw,readonly=on,if=ide,index=2")},
		{b: Boot{Image: "x.iso", Firmware: OVMF, Media: Disk},
			want: append(append([]string{}, common...),
				"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=code.fd",
				"-drive", "if=pflash,format=raw,unit=1,file=vars.fd",
				"-drive", "file=x.iso,format=raw,if=ide,index=0,snapshot=on")},
		{b: Boot{Image: "x.iso", Firmware: "coreboot", Media: Disk}, err: "valid: seabios, ovmf"},
		{b: Boot{Image: "x.iso", Firmware: SeaBIOS, Media: "floppy"}, err: "valid: cdrom, disk"},
	}
	for _, tt := range tests {
		got, err := Args(tt.b, "s.log", "code.fd", "vars.fd")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%+v: error = %v, want %q", tt.b, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Args(%+v) = %q, %v; want %q", tt.b, got, err, tt.want)
		}
	}
}

func TestFatalRE(t *testing.T) {
	for _, s := range []string{"No bootable device.", "grub rescue> ", "Kernel panic - not syncing", "LIVE-BOOT-FAIL: x", "UEFI Interactive Shell v2.2"} {
		if !FatalRE.MatchString(s) {
			t.Errorf("FatalRE misses %q", s)
		}
	}
	// Harmless messages seen in good boots.
	for _, s := range []string{"error: no suitable video mode found.", `BdsDxe: failed to load Boot0001 "UEFI QEMU DVD-ROM QM00003 ": Not Found`} {
		if FatalRE.MatchString(s) {
			t.Errorf("FatalRE matches harmless %q", s)
		}
	}
}

// TestWriteNewc checks the archive with GNU cpio.
func TestWriteNewc(t *testing.T) {
	cpio := testutil.RequireTool(t, "cpio")[0]
	var b bytes.Buffer
	err := WriteNewc(&b, []CpioEntry{
		{Name: "root.squashfs", Mode: 0o100644, Data: []byte("hsqs-data")},
		{Name: "etc", Mode: 0o40755},
		{Name: "etc/x", Mode: 0o100600, Data: []byte("abc")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.Len()%4 != 0 {
		t.Errorf("archive length %d is not 4-aligned", b.Len())
	}
	// The first member's data starts at 110 + len("root.squashfs\x00") = 124.
	if got := b.String()[124:128]; got != "hsqs" {
		t.Errorf("data at 124 = %q", got)
	}
	cmd := exec.Command(cpio, "-t", "-v", "--quiet")
	cmd.Stdin = bytes.NewReader(b.Bytes())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v: %s", err, out)
	}
	got := string(out)
	for _, want := range []string{"-rw-r--r--", "root.squashfs", "drwxr-xr-x", "etc/x", "-rw-------"} {
		if !strings.Contains(got, want) {
			t.Errorf("cpio -tv lacks %q:\n%s", want, got)
		}
	}
}
