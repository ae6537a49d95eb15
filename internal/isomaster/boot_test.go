package isomaster

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/okd-project/scos-builder/internal/bootconfig/bootconfigtest"
	"github.com/okd-project/scos-builder/internal/fixtures"
	"github.com/okd-project/scos-builder/internal/fixtures/qemuboot"
	"github.com/okd-project/scos-builder/internal/logtail"
	"github.com/okd-project/scos-builder/internal/testutil"
)

// bootInit is the test initramfs's /init. Like the CoreOS live
// initramfs it finds the ISO by the label in coreos.liveiso=, loop-mounts
// images/pxeboot/rootfs.img at offset 124 and globs
// ostree/boot.1/*/*/0. It reports on the serial port itself (the live
// kargs carry no console=) and powers off.
const bootInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox --install -s /bin
export PATH=/bin
out() { echo "$@" > /dev/ttyS0; }
fail() { out "LIVE-BOOT-FAIL: $*"; poweroff -f; }
fw=bios
[ -d /sys/firmware/efi ] && fw=uefi
out "LIVE-FIRMWARE: $fw"
out "LIVE-CMDLINE: $(cat /proc/cmdline)"
for m in $(cat /modules); do insmod "/lib/modules/$m" 2>/dev/ttyS0 || out "LIVE-INSMOD-FAILED: $m"; done
label=
for arg in $(cat /proc/cmdline); do
  case "$arg" in coreos.liveiso=*) label="${arg#coreos.liveiso=}";; esac
done
[ -n "$label" ] || fail "no coreos.liveiso= karg"
dev=
i=0
while [ $i -lt 300 ]; do
  dev=$(findfs "LABEL=$label" 2>/dev/null) && break
  i=$((i+1))
  sleep 0.1
done
[ -n "$dev" ] || fail "no device labelled $label"
out "LIVE-ISO-DEVICE: $dev"
mkdir -p /run/media/iso /sysroot
mount -t iso9660 -o ro "$dev" /run/media/iso || fail "mounting $dev"
losetup -r -o 124 /dev/loop0 /run/media/iso/images/pxeboot/rootfs.img || fail "losetup"
mount -t squashfs -o ro /dev/loop0 /sysroot || fail "mounting rootfs.img at offset 124"
n=0
for d in /sysroot/ostree/boot.1/*/*/0; do [ -e "$d" ] && n=$((n+1)); done
out "LIVE-DEPLOYMENTS: $n"
out "LIVE-ROOTFS-MARKER: $(cat /sysroot/ostree/boot.1/*/*/0/etc/live-marker)"
out "LIVE-BOOT-OK"
poweroff -f
`

// bootModules are what bootInit loads: CD and disk over IDE/ATA, loop,
// ISO 9660, squashfs; the CRC providers come first so sd_mod's
// dependencies find them.
var bootModules = []string{"crct10dif_generic", "crc64_rocksoft_generic", "sr_mod", "ata_piix", "sd_mod", "isofs", "squashfs", "loop"}

// TestBootQEMU boots the mastered ISO in QEMU (TCG) with SeaBIOS and OVMF,
// as a CD and as a disk: each must reach the test init with the live
// kernel arguments, coreos.liveiso=<volid> included.
func TestBootQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	testutil.RequireTool(t, "qemu-system-x86_64", "xorriso", "mformat", "modprobe")
	if _, _, err := qemuboot.OVMFFiles(qemuboot.UEFI); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	ctx := context.Background()
	kernel, err := fixtures.DebianKernel(ctx, fixtures.DefaultCacheDir(), "", t.Logf)
	if err != nil {
		testutil.SkipOrFail(t, "no Debian kernel for the boot test: %v", err)
	}
	mods, err := kernel.ModuleLoadOrder(ctx, bootModules...)
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string][]byte{"modules": []byte(strings.Join(mods, "\n") + "\n")}
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(kernel.ModulesDir(), m))
		if err != nil {
			t.Fatal(err)
		}
		extra["lib/modules/"+filepath.ToSlash(m)] = data
	}
	dir := t.TempDir()
	initrdData, err := fixtures.BusyboxInitramfs(bootInit, extra)
	if err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	initrd := filepath.Join(dir, "initrd.img")
	if err := os.WriteFile(initrd, initrdData, 0o644); err != nil {
		t.Fatal(err)
	}
	// A fresh marker proves the guest read this build's rootfs.
	marker := "rootfs-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	in := liveInputs{kernel: kernel.Vmlinuz(), initramfs: initrd, rootfs: bootconfigtest.Rootfs(t, dir, marker)}
	iso, res, _ := buildISO(t, "x86_64", in, []string{"mitigations=auto,nosmt"})
	wantCmdline := res.Kargs.Default
	if !strings.Contains(wantCmdline, "coreos.liveiso="+res.VolumeID) {
		t.Fatalf("default kargs %q lack coreos.liveiso", wantCmdline)
	}

	for _, c := range []struct {
		fw    qemuboot.Firmware
		media string
		want  string
	}{
		{qemuboot.BIOS, "cdrom", "bios"},
		{qemuboot.BIOS, "disk", "bios"},
		{qemuboot.UEFI, "cdrom", "uefi"},
		{qemuboot.UEFI, "disk", "uefi"},
	} {
		t.Run(string(c.fw)+"-"+c.media, func(t *testing.T) {
			t.Parallel()
			// Generous: CI runners and shared hosts are slow under TCG; dead
			// ends are detected early anyway.
			cfg := qemuboot.Config{Firmware: c.fw, WorkDir: t.TempDir(), Timeout: 300 * time.Second}
			if c.media == "cdrom" {
				cfg.CDROM = iso
			} else {
				cfg.Disk = iso
			}
			tr, err := qemuboot.Boot(context.Background(), cfg)
			if err != nil {
				t.Fatalf("%v\nqemu: %s", err, argsOf(tr))
			}
			log := clean(tr.Transcript)
			var report []string
			for _, l := range strings.Split(log, "\n") {
				if strings.HasPrefix(l, "LIVE-") && !strings.HasPrefix(l, "LIVE-CMDLINE") {
					report = append(report, l)
				}
			}
			t.Logf("%s/%s booted in %s: %s", c.fw, c.media, tr.Duration.Round(100*time.Millisecond), strings.Join(report, "; "))
			if !strings.Contains(log, "LIVE-FIRMWARE: "+c.want) {
				t.Errorf("firmware is not %s:\n%s", c.want, logtail.Last(log, 20))
			}
			m := regexp.MustCompile(`LIVE-CMDLINE: (.*)`).FindStringSubmatch(log)
			if m == nil {
				t.Fatalf("no command line in the log:\n%s", logtail.Last(log, 20))
			}
			// The bootloader adds BOOT_IMAGE= (GRUB) or initrd= (ISOLINUX).
			if !strings.Contains(m[1], wantCmdline) || !strings.Contains(m[1], "coreos.liveiso="+res.VolumeID) {
				t.Errorf("command line %q lacks %q", m[1], wantCmdline)
			}
			for _, want := range []string{"LIVE-ISO-DEVICE: /dev/", "LIVE-DEPLOYMENTS: 1\n", "LIVE-ROOTFS-MARKER: " + marker + "\n"} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, logtail.Last(log, 20))
				}
			}
		})
	}
}

// clean drops terminal control sequences from a serial log.
func clean(s string) string {
	return regexp.MustCompile(`\x1b\[[0-9;=?]*[A-Za-z]`).ReplaceAllString(strings.ReplaceAll(s, "\r", ""), "")
}

func argsOf(tr *qemuboot.Result) string {
	if tr == nil {
		return ""
	}
	return strings.Join(tr.Args, " ")
}
