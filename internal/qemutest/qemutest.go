// Package qemutest boots disk and CD images in QEMU (TCG, no KVM) for
// tests: it starts qemu-system-x86_64 with the serial port written to a
// file, waits for a marker line or a known dead end or a timeout, and
// returns the serial transcript. It also provides the inputs such tests
// need: a Debian kernel (fetched once into a cache with apt-get download)
// and a tiny busybox initramfs.
package qemutest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Firmware is the guest firmware.
type Firmware string

// Media is how the image is attached.
type Media string

const (
	SeaBIOS Firmware = "seabios"
	OVMF    Firmware = "ovmf"

	CDROM Media = "cdrom" // IDE CD-ROM: El Torito boot
	Disk  Media = "disk"  // IDE disk (snapshot, never written): MBR/GPT boot
)

// DefaultMarker is what the test initramfs prints when it reached its end.
const DefaultMarker = "LIVE-BOOT-OK"

// FatalRE matches console output of boots that will never finish by
// themselves: firmware that found nothing to boot, a GRUB rescue prompt, a
// kernel panic, or the test init reporting failure.
var FatalRE = regexp.MustCompile(`No bootable device|No bootable option or device was found|Access Denied|UEFI Interactive Shell|Shell> |grub rescue>|error: file .* not found|error: you need to load the kernel first|Kernel panic|LIVE-BOOT-FAIL`)

// Boot describes one QEMU run.
type Boot struct {
	Image    string
	Firmware Firmware
	Media    Media
	// WorkDir holds the serial log and the OVMF variable store copy.
	WorkDir string
	// Marker ends the boot successfully (default DefaultMarker).
	Marker string
	// Timeout bounds the whole boot (default 120 s).
	Timeout time.Duration
	// MemoryMB is the guest memory (default 1024).
	MemoryMB int
}

// Transcript is what a boot printed on its serial port.
type Transcript struct {
	Log     string
	Elapsed time.Duration
	Args    []string
}

// OVMFFiles returns the OVMF code and variable-store templates installed
// by Debian's (or Fedora's) ovmf package.
func OVMFFiles() (code, vars string, err error) {
	pairs := [][2]string{
		{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"},
		{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"},
		{"/usr/share/edk2/ovmf/OVMF_CODE.fd", "/usr/share/edk2/ovmf/OVMF_VARS.fd"},
	}
	for _, p := range pairs {
		if fileExists(p[0]) && fileExists(p[1]) {
			return p[0], p[1], nil
		}
	}
	return "", "", errors.New("finding OVMF firmware: not installed (install the Debian package \"ovmf\" or the Fedora package \"edk2-ovmf\")")
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Args returns the qemu-system-x86_64 arguments for b, with the serial
// port written to serialLog and OVMF variables in varsFile.
func Args(b Boot, serialLog, ovmfCode, varsFile string) ([]string, error) {
	mem := b.MemoryMB
	if mem == 0 {
		mem = 1024
	}
	args := []string{
		"-machine", "pc", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", fmt.Sprint(mem),
		// -nographic makes SeaBIOS copy its text console to the serial
		// port, which puts bootloader output into the log.
		"-nographic", "-monitor", "none", "-serial", "file:" + serialLog,
		"-no-reboot", "-nic", "none",
	}
	switch b.Firmware {
	case SeaBIOS:
	case OVMF:
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+ovmfCode,
			"-drive", "if=pflash,format=raw,unit=1,file="+varsFile)
	default:
		return nil, fmt.Errorf("unknown firmware %q (valid: %s, %s)", b.Firmware, SeaBIOS, OVMF)
	}
	switch b.Media {
	case CDROM:
		args = append(args, "-drive", "file="+b.Image+",media=cdrom,format=raw,readonly=on,if=ide,index=2")
	case Disk:
		args = append(args, "-drive", "file="+b.Image+",format=raw,if=ide,index=0,snapshot=on")
	default:
		return nil, fmt.Errorf("unknown media %q (valid: %s, %s)", b.Media, CDROM, Disk)
	}
	return args, nil
}

// Run boots b and waits for its marker. The error is non-nil when the
// marker did not appear (a dead end, QEMU exiting, or the timeout); the
// transcript is returned either way.
func Run(ctx context.Context, b Boot) (*Transcript, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("finding qemu-system-x86_64: %w (install the Debian package \"qemu-system-x86\")", err)
	}
	if b.WorkDir == "" {
		return nil, errors.New("booting: no work directory")
	}
	marker := b.Marker
	if marker == "" {
		marker = DefaultMarker
	}
	timeout := b.Timeout
	if timeout == 0 {
		timeout = 120 * time.Second
	}
	serialLog := filepath.Join(b.WorkDir, fmt.Sprintf("serial-%s-%s.log", b.Firmware, b.Media))
	varsFile := filepath.Join(b.WorkDir, fmt.Sprintf("ovmf-vars-%s.fd", b.Media))
	var code string
	if b.Firmware == OVMF {
		var vars string
		code, vars, err = OVMFFiles()
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(vars)
		if err != nil {
			return nil, err
		}
		// Every VM gets its own writable copy of the variable store.
		if err := os.WriteFile(varsFile, data, 0o644); err != nil {
			return nil, err
		}
	}
	args, err := Args(b, serialLog, code, varsFile)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(serialLog, nil, 0o644); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout strings.Builder
	cmd := exec.Command(qemu, args...)
	cmd.Stdin = nil
	cmd.Stdout = &stdout
	cmd.Stderr = &stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	tr := &Transcript{Args: append([]string{qemu}, args...)}
	read := func() string {
		data, _ := os.ReadFile(serialLog)
		return string(data)
	}
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case werr := <-done:
			tr.Elapsed = time.Since(start)
			tr.Log = read()
			if strings.Contains(tr.Log, marker) {
				return tr, nil
			}
			return tr, fmt.Errorf("qemu exited (%v) before %q: %s", werr, marker, strings.TrimSpace(stdout.String()))
		case <-ctx.Done():
			stop()
			tr.Elapsed = time.Since(start)
			tr.Log = read()
			if strings.Contains(tr.Log, marker) {
				return tr, nil
			}
			return tr, fmt.Errorf("no %q after %s: %w", marker, tr.Elapsed.Round(time.Second), ctx.Err())
		case <-tick.C:
			log := read()
			if strings.Contains(log, marker) {
				// The init powers off right after the marker; give it a
				// moment, then make sure QEMU is gone.
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					stop()
				}
				tr.Elapsed = time.Since(start)
				tr.Log = read()
				return tr, nil
			}
			if m := FatalRE.FindString(log); m != "" {
				time.Sleep(time.Second) // let the rest of the message arrive
				stop()
				tr.Elapsed = time.Since(start)
				tr.Log = read()
				return tr, fmt.Errorf("boot reached a dead end (%q) after %s", m, tr.Elapsed.Round(time.Second))
			}
		}
	}
}
