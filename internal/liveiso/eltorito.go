package liveiso

import (
	"encoding/binary"
	"fmt"
)

// BootEntry is one El Torito boot catalog entry.
type BootEntry struct {
	Platform    string `json:"platform"`     // "bios", "uefi", "powerpc", "mac" or "0x.."
	Bootable    bool   `json:"bootable"`     // boot indicator 0x88
	Emulation   string `json:"emulation"`    // "none", "1.2M", "1.44M", "2.88M", "hdd"
	LoadSectors uint16 `json:"load_sectors"` // in 512-byte units
	LBA         uint32 `json:"lba"`
	File        string `json:"file,omitempty"` // primary-tree path of the file at LBA, if one starts there
}

func platformName(id byte) string {
	switch id {
	case 0:
		return "bios"
	case 1:
		return "powerpc"
	case 2:
		return "mac"
	case 0xef:
		return "uefi"
	}
	return fmt.Sprintf("0x%02x", id)
}

func emulationName(m byte) string {
	switch m & 0x0f {
	case 0:
		return "none"
	case 1:
		return "1.2M"
	case 2:
		return "1.44M"
	case 3:
		return "2.88M"
	case 4:
		return "hdd"
	}
	return fmt.Sprintf("0x%02x", m&0x0f)
}

// bootEntries reads the El Torito boot catalog, if the image has one.
func (fs *isoFS) bootEntries() ([]BootEntry, error) {
	if fs.bootRecord < 0 {
		return nil, nil
	}
	cat := make([]byte, sectorSize)
	if _, err := fs.r.ReadAt(cat, fs.bootRecord*sectorSize); err != nil {
		return nil, fmt.Errorf("reading El Torito boot catalog at sector %d: %w", fs.bootRecord, noEOF(err))
	}
	if cat[0] != 1 || cat[30] != 0x55 || cat[31] != 0xaa {
		return nil, fmt.Errorf("El Torito boot catalog at sector %d has no validation entry", fs.bootRecord)
	}
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(cat[i:])
	}
	if sum != 0 {
		return nil, fmt.Errorf("El Torito validation entry checksum is wrong")
	}
	entry := func(e []byte, platform byte) BootEntry {
		return BootEntry{
			Platform:    platformName(platform),
			Bootable:    e[0] == 0x88,
			Emulation:   emulationName(e[1]),
			LoadSectors: binary.LittleEndian.Uint16(e[6:8]),
			LBA:         binary.LittleEndian.Uint32(e[8:12]),
		}
	}
	entries := []BootEntry{entry(cat[32:64], cat[1])}
	for pos := 64; pos+32 <= len(cat); {
		h := cat[pos : pos+32]
		if h[0] != 0x90 && h[0] != 0x91 {
			break
		}
		platform, n := h[1], int(binary.LittleEndian.Uint16(h[2:4]))
		pos += 32
		for i := 0; i < n && pos+32 <= len(cat); i++ {
			e := cat[pos : pos+32]
			if e[0] == 0x44 { // extension entry
				i--
				pos += 32
				continue
			}
			entries = append(entries, entry(e, platform))
			pos += 32
		}
		if h[0] == 0x91 {
			break
		}
	}
	// Name the files the entries load.
	byLBA := map[uint32]string{}
	if err := fs.walk(func(path string, r record) error {
		if !r.dir && r.length > 0 {
			if _, ok := byLBA[r.lba]; !ok {
				byLBA[r.lba] = path
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for i := range entries {
		entries[i].File = byLBA[entries[i].LBA]
	}
	return entries, nil
}
