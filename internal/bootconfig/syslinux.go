package bootconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SyslinuxFiles are the ISOLINUX files copied into the ISO's isolinux/
// directory (what coreos-assembler copies from its build root).
var SyslinuxFiles = []string{"isolinux.bin", "ldlinux.c32", "libcom32.c32", "libutil.c32", "vesamenu.c32"}

// IsohybridMBRFile is the isohybrid MBR boot code xorriso writes into the
// ISO's system area so BIOS boots it as a disk.
const IsohybridMBRFile = "isohdpfx.bin"

// syslinuxSearchDirs are where Debian (isolinux, syslinux-common) and
// Fedora (syslinux, syslinux-nonlinux) install the files.
var syslinuxSearchDirs = []string{
	"/usr/lib/ISOLINUX",
	"/usr/lib/syslinux/modules/bios",
	"/usr/lib/syslinux/mbr",
	"/usr/share/syslinux",
}

// Syslinux maps each needed file name (SyslinuxFiles and
// IsohybridMBRFile) to its path on the host.
type Syslinux map[string]string

// FindSyslinux locates the BIOS boot files. With dir set, only dir is
// searched (all files in one directory); otherwise the Debian and Fedora
// locations are. The error names the packages to install.
func FindSyslinux(dir string) (Syslinux, error) {
	dirs := syslinuxSearchDirs
	if dir != "" {
		dirs = []string{dir}
	}
	found := Syslinux{}
	var missing []string
	for _, name := range append(append([]string{}, SyslinuxFiles...), IsohybridMBRFile) {
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				found[name] = p
				break
			}
		}
		if found[name] == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("finding syslinux files %s in %s: not found (install the Debian packages \"isolinux\" and \"syslinux-common\", or the Fedora packages \"syslinux\" and \"syslinux-nonlinux\", or pass --syslinux-dir DIR holding them)",
			strings.Join(missing, ", "), strings.Join(dirs, ", "))
	}
	return found, nil
}
