package isomaster

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/bootconfig/bootconfigtest"
	"github.com/okd-project/scos-builder/internal/qemutest"
	"github.com/okd-project/scos-builder/internal/testutil"
)

// bootInit is the test initramfs's /init: it reports the firmware and the
// kernel command line on the serial port itself (the live kargs carry no
// console=), then the marker, and powers off.
const bootInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
fw=bios
[ -d /sys/firmware/efi ] && fw=uefi
{
  echo "LIVE-FIRMWARE: $fw"
  echo "LIVE-CMDLINE: $(/bin/busybox cat /proc/cmdline)"
  echo "LIVE-BOOT-OK"
} > /dev/ttyS0
/bin/busybox poweroff -f
`

// TestBootQEMU boots the mastered ISO in QEMU (TCG) with SeaBIOS and OVMF,
// as a CD and as a disk: each must reach the test init with the live
// kernel arguments, coreos.liveiso=<volid> included.
func TestBootQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	testutil.RequireTool(t, "qemu-system-x86_64", "xorriso", "mformat")
	if _, _, err := qemutest.OVMFFiles(); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	kernel, err := qemutest.DebianKernel(context.Background(), qemutest.CacheDir())
	if err != nil {
		testutil.SkipOrFail(t, "no Debian kernel for the boot test: %v", err)
	}
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initrd.img")
	if err := qemutest.BusyboxInitramfs(initrd, bootInit, nil); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	in := liveInputs{kernel: kernel, initramfs: initrd, rootfs: bootconfigtest.Rootfs(t, dir, "boot")}
	iso, res, _ := buildISO(t, "x86_64", in, []string{"mitigations=auto,nosmt"})
	wantCmdline := res.Kargs.Default
	if !strings.Contains(wantCmdline, "coreos.liveiso="+res.VolumeID) {
		t.Fatalf("default kargs %q lack coreos.liveiso", wantCmdline)
	}

	for _, c := range []struct {
		fw    qemutest.Firmware
		media qemutest.Media
		want  string
	}{
		{qemutest.SeaBIOS, qemutest.CDROM, "bios"},
		{qemutest.SeaBIOS, qemutest.Disk, "bios"},
		{qemutest.OVMF, qemutest.CDROM, "uefi"},
		{qemutest.OVMF, qemutest.Disk, "uefi"},
	} {
		t.Run(string(c.fw)+"-"+string(c.media), func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			tr, err := qemutest.Run(context.Background(), qemutest.Boot{Image: iso, Firmware: c.fw, Media: c.media, WorkDir: work})
			if err != nil {
				t.Fatalf("%v\nqemu: %s\nserial log:\n%s", err, argsOf(tr), tail(clean(logOf(tr)), 40))
			}
			t.Logf("%s/%s booted in %s", c.fw, c.media, tr.Elapsed.Round(100*1e6))
			log := clean(tr.Log)
			if !strings.Contains(log, "LIVE-FIRMWARE: "+c.want) {
				t.Errorf("firmware is not %s:\n%s", c.want, tail(log, 20))
			}
			m := regexp.MustCompile(`LIVE-CMDLINE: (.*)`).FindStringSubmatch(log)
			if m == nil {
				t.Fatalf("no command line in the log:\n%s", tail(log, 20))
			}
			// The bootloader adds BOOT_IMAGE= (GRUB) or initrd= (ISOLINUX).
			if !strings.Contains(m[1], wantCmdline) || !strings.Contains(m[1], "coreos.liveiso="+res.VolumeID) {
				t.Errorf("command line %q lacks %q", m[1], wantCmdline)
			}
		})
	}
}

// clean drops terminal control sequences from a serial log.
func clean(s string) string {
	return regexp.MustCompile(`\x1b\[[0-9;=?]*[A-Za-z]`).ReplaceAllString(strings.ReplaceAll(s, "\r", ""), "")
}

func argsOf(tr *qemutest.Transcript) string {
	if tr == nil {
		return ""
	}
	return strings.Join(tr.Args, " ")
}

func logOf(tr *qemutest.Transcript) string {
	if tr == nil {
		return ""
	}
	return tr.Log
}
