package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/recipes"
)

func recipesCommand() *cli.Command {
	return &cli.Command{
		Name:  "recipes",
		Usage: "list the built-in recipes (OS families) and their defaults",
		Flags: []cli.Flag{jsonFlag},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			all, err := recipes.All()
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(cmd, all)
			}
			tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tALIASES\tOSNAME\tPAYLOAD TAGS\tDESCRIPTION")
			for _, r := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, strings.Join(r.Aliases, ","), r.OSName, strings.Join(r.OSTags, ","), r.Description)
			}
			return tw.Flush()
		},
	}
}
