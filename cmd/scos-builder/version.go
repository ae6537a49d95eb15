package main

import (
	"context"
	"fmt"
	"runtime"
	"sort"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/builder"
)

// Set at link time by scripts/build (-ldflags -X).
var (
	version = "dev"
	commit  = "unknown"
)

// externalTools are the programs some stages or backends run.
var externalTools = []string{"xorriso", "mksquashfs", "unsquashfs", "mkfs.erofs", "mformat", "mcopy", "skopeo", "ostree", "isoinfo"}

type versionInfo struct {
	Version   string            `json:"version"`
	Commit    string            `json:"commit"`
	GoVersion string            `json:"go-version"`
	Platform  string            `json:"platform"`
	Tools     map[string]string `json:"tools"`
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, commit, Go version and the external tools found",
		Flags: []cli.Flag{jsonFlag},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			var host builder.HostTools
			info := versionInfo{Version: version, Commit: commit, GoVersion: runtime.Version(),
				Platform: runtime.GOOS + "/" + runtime.GOARCH, Tools: map[string]string{}}
			for _, t := range externalTools {
				info.Tools[t] = host.ToolVersion(t)
			}
			if cmd.Bool("json") {
				return printJSON(cmd, info)
			}
			w := stdout(cmd)
			fmt.Fprintf(w, "scos-builder %s\ncommit:   %s\ngo:       %s\nplatform: %s\ntools:\n", info.Version, info.Commit, info.GoVersion, info.Platform)
			names := append([]string(nil), externalTools...)
			sort.Strings(names)
			for _, t := range names {
				fmt.Fprintf(w, "  %-11s %s\n", t+":", info.Tools[t])
			}
			return nil
		},
	}
}
