package liveiso

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Hostile embed areas give errors, never panics.
func FuzzParseInitrd(f *testing.F) {
	in := &Initrd{Members: map[string][]byte{"config.ign": []byte("{}"), "etc/x/y": []byte("z")}}
	b, err := in.Bytes()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(append(append([]byte{}, b...), make([]byte, 64)...))
	f.Add([]byte("070701"))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x00, 0x01, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseInitrd(data)
		if err == nil && in == nil {
			t.Fatal("nil initrd without error")
		}
	})
}

// Hostile images give errors, never panics.
func FuzzOpen(f *testing.F) {
	// A minimal ISO9660 header: PVD with a root record, then a terminator.
	img := make([]byte, 20*sectorSize)
	pvd := img[16*sectorSize:]
	pvd[0], pvd[6] = 1, 1
	copy(pvd[1:], "CD001")
	copy(pvd[40:], "VOLUME")
	pvd[80] = 20
	root := pvd[156:]
	root[0], root[2], root[10], root[11], root[25], root[32] = 34, 18, 0, 8, 2, 1
	term := img[17*sectorSize:]
	term[0], term[6] = 255, 1
	copy(term[1:], "CD001")
	dir := img[18*sectorSize:]
	dir[0], dir[25], dir[32] = 34, 2, 1
	f.Add(img[16*sectorSize : 19*sectorSize])
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzed bytes replace sectors 16 onwards.
		b := append(bytes.Clone(img[:16*sectorSize]), data...)
		p := filepath.Join(t.TempDir(), "f.iso")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if iso, err := Open(p); err == nil {
			iso.BootEntries()
			iso.Close()
		}
	})
}
