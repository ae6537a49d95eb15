// Command scos-builder builds CoreOS live boot images from ostree/bootc
// container images. This minimal main registers the payload command; the
// full command tree is wired by the lead.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"
)

func main() {
	root := &cli.Command{Name: "scos-builder", Commands: []*cli.Command{payloadCommand()}}
	if err := root.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
