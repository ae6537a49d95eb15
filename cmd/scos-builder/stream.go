package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/internal/stream"
)

// streamCommand is `scos-builder stream merge|validate`.
func streamCommand() *cli.Command {
	return &cli.Command{
		Name:  "stream",
		Usage: "merge and validate CoreOS stream metadata (stream JSON)",
		Commands: []*cli.Command{
			{
				Name:      "merge",
				Usage:     "merge per-architecture streams into one, refusing conflicting entries",
				ArgsUsage: "A.json B.json …",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the merged stream to `FILE` (default: stdout)"},
				},
				Action: runStreamMerge,
			},
			{
				Name:      "validate",
				Usage:     "check stream files against the stream schema",
				ArgsUsage: "FILE …",
				Action:    runStreamValidate,
			},
		},
	}
}

func runStreamMerge(_ context.Context, cmd *cli.Command) error {
	files := cmd.Args().Slice()
	if len(files) == 0 {
		return errors.New("stream merge: no stream files given (usage: stream merge A.json B.json … [-o OUT])")
	}
	inputs := make([]stream.Input, 0, len(files))
	for _, f := range files {
		s, err := stream.ReadFile(f)
		if err != nil {
			return err
		}
		inputs = append(inputs, stream.Input{Name: f, Stream: s})
	}
	merged, err := stream.Merge(inputs...)
	if err != nil {
		return err
	}
	if err := merged.Validate(); err != nil {
		return fmt.Errorf("merged stream is invalid: %w", err)
	}
	if out := cmd.String("output"); out != "" {
		return merged.WriteFile(out)
	}
	data, err := merged.Marshal()
	if err != nil {
		return err
	}
	_, err = stdout(cmd).Write(data)
	return err
}

func runStreamValidate(_ context.Context, cmd *cli.Command) error {
	files := cmd.Args().Slice()
	if len(files) == 0 {
		return errors.New("stream validate: no stream file given (usage: stream validate FILE …)")
	}
	var errs []error
	for _, f := range files {
		s, err := stream.ReadFile(f)
		if err == nil {
			if err = s.Validate(); err != nil {
				err = fmt.Errorf("%s: %w", f, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stderr(cmd), "%s: valid (stream %q, %d architectures)\n", f, s.Stream, len(s.Architectures))
	}
	return errors.Join(errs...)
}
