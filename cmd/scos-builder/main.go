// Minimal entry point so the iso commands build and can be tried on their
// own; the lead's main.go replaces this file.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"
)

func main() {
	root := &cli.Command{Name: "scos-builder", Commands: []*cli.Command{isoCommand()}}
	if err := root.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
