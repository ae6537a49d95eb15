package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/builder"
)

const rootDescription = `scos-builder turns an ostree/bootc container image — above all the CentOS
Stream CoreOS (SCOS) node image inside an OKD release payload — into CoreOS
live boot images: a bootable ISO (BIOS and UEFI, CD and USB) with an Ignition
embed area, the PXE kernel, initramfs and rootfs, and a CoreOS stream JSON
describing them. The ISO works unchanged with coreos-installer, the OpenShift
agent installer and the CoreOS live initramfs.

It runs as one binary without a VM, KVM or emulation: the build is a plan of
stages (payload.resolve, image.fetch, ostree.import, sysroot.deploy,
live.rootfs, live.initrd, live.bootconfig, iso.master, stream.emit) whose
outputs are kept in a content-addressed cache, so a rebuild with unchanged
inputs reuses everything, and the same inputs and SOURCE_DATE_EPOCH give the
same bytes.`

// logLevels are the values of --log-level.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// commands lists the subcommands; each is defined in its own file.
func commands() []*cli.Command {
	return []*cli.Command{
		buildCommand(),
		planCommand(),
		versionCommand(),
		recipesCommand(),
		payloadCommand(),
		isoCommand(),
		streamCommand(),
		publishCommand(),
	}
}

func newApp() *cli.Command {
	app := &cli.Command{
		Name:        "scos-builder",
		Usage:       "build CoreOS live ISO, PXE images and stream JSON from ostree container images",
		Description: rootDescription,
		Version:     version,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:  "cache-dir",
				Usage: "stage cache and blob cache `DIR`",
				Value: defaultCacheDir(),
			},
			&cli.StringFlag{
				Name:  "progress",
				Usage: "progress output: " + strings.Join(builder.ProgressModes, "|") + " (auto: bars on a terminal, plain lines otherwise)",
				Value: "auto",
				Validator: func(s string) error {
					_, err := builder.NewReporter(s, io.Discard)
					return err
				},
			},
			&cli.StringFlag{
				Name:  "log-level",
				Usage: "log verbosity on stderr: debug|info|warn|error",
				Value: "info",
				Validator: func(s string) error {
					if _, ok := logLevels[s]; !ok {
						return fmt.Errorf("unknown log level %q (valid: debug, info, warn, error)", s)
					}
					return nil
				},
			},
		},
		Before: func(ctx context.Context, cmd *cli.Command) (context.Context, error) {
			level := logLevels[cmd.String("log-level")]
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
			return ctx, nil
		},
		Commands:              commands(),
		EnableShellCompletion: true,
		// Errors are printed once, by main; usage errors do not dump the help.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
	}
	setUsageErrors(app)
	return app
}

// setUsageErrors makes every command report a usage error in one line
// (pointing at --help) instead of dumping its help text.
func setUsageErrors(cmd *cli.Command) {
	cmd.OnUsageError = func(ctx context.Context, c *cli.Command, err error, isSubcommand bool) error {
		return fmt.Errorf("%w (see %s --help)", err, c.FullName())
	}
	for _, sub := range cmd.Commands {
		setUsageErrors(sub)
	}
}

// defaultCacheDir is $XDG_CACHE_HOME/scos-builder (~/.cache/scos-builder).
func defaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "scos-builder")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "scos-builder")
	}
	return filepath.Join(os.TempDir(), "scos-builder-cache")
}

// jsonFlag is the --json flag of commands that print results.
var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout"}

// printJSON writes v as indented JSON to the command's stdout.
func printJSON(cmd *cli.Command, v any) error {
	enc := json.NewEncoder(cmd.Root().Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stdout is where machine output goes: the root command's writer (set by
// tests), else the process's.
func stdout(cmd *cli.Command) io.Writer {
	if w := cmd.Root().Writer; w != nil {
		return w
	}
	return os.Stdout
}

// stdin is the root command's reader (set by tests), else the process's.
func stdin(cmd *cli.Command) io.Reader {
	if r := cmd.Root().Reader; r != nil {
		return r
	}
	return os.Stdin
}

// stderr is where logs and progress go: the root command's error writer
// (set by tests), else the process's.
func stderr(cmd *cli.Command) io.Writer {
	if w := cmd.Root().ErrWriter; w != nil {
		return w
	}
	return os.Stderr
}
