// Command squashfs-native writes a directory tree on disk with the native
// squashfs writer, for scripts/bench to compare with mksquashfs.
//
//	squashfs-native [-level N] [-block BYTES] [-workers N] DIR OUT
//
// It loads DIR with fstree.FromDir (file data stays in place), writes OUT
// and prints one line on stdout: "load_s=L write_s=W bytes=N". Peak memory
// is left to the caller to measure (scripts/bench runs it under
// /usr/bin/time), so that both tools are measured the same way.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/squashfs"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "squashfs-native:", err)
		os.Exit(1)
	}
}

func run() error {
	level := flag.Int("level", 15, "zstd compression level")
	block := flag.Int("block", 128<<10, "data block size in bytes")
	workers := flag.Int("workers", 0, "parallel compressors (default GOMAXPROCS)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: squashfs-native [-level N] [-block BYTES] [-workers N] DIR OUT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		return fmt.Errorf("want DIR and OUT, got %d arguments", flag.NArg())
	}
	dir, out := flag.Arg(0), flag.Arg(1)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	start := time.Now()
	tree, err := fstree.FromDir(dir, nil)
	if err != nil {
		return fmt.Errorf("loading %s: %w", dir, err)
	}
	load := time.Since(start)

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	start = time.Now()
	n, err := squashfs.Write(ctx, f, tree, squashfs.Options{
		Compression: squashfs.Zstd,
		Level:       *level,
		BlockSize:   *block,
		Workers:     *workers,
	})
	if err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	fmt.Printf("load_s=%.2f write_s=%.2f bytes=%d\n", load.Seconds(), time.Since(start).Seconds(), n)
	return nil
}
