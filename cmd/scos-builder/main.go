// Command scos-builder. This minimal main registers the stream and publish
// commands; the full CLI wiring replaces it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"
)

func main() {
	root := &cli.Command{
		Name:     "scos-builder",
		Commands: []*cli.Command{streamCommand(), publishCommand()},
	}
	if err := root.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
