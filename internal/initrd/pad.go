package initrd

// pad4 is the number of NUL bytes that bring n up to a multiple of 4: the
// alignment the kernel expects between concatenated cpio archives.
func pad4(n int64) int { return int((4 - n%4) % 4) }
