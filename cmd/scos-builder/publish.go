package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/internal/publish"
)

// publishCommand is `scos-builder publish OUTDIR… --to REF --format …`.
func publishCommand() *cli.Command {
	return &cli.Command{
		Name:      "publish",
		Usage:     "push build outputs as a machine-os-images image or as OCI artifacts",
		ArgsUsage: "OUTDIR …",
		Description: "Each OUTDIR is one build's output directory (one architecture): its stream file\n" +
			"<prefix>.json and the metal ISO it names. Several OUTDIRs become one multi-arch\n" +
			"image index. Timestamps come from SOURCE_DATE_EPOCH, else the newest stream's\n" +
			"last-modified, so the same inputs give the same digests.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "to", Usage: "push to registry reference `REF`, e.g. quay.io/me/machine-os-images:4.19"},
			&cli.StringFlag{Name: "format", Value: publish.FormatMachineOSImages, Usage: "`FORMAT`: " + strings.Join(publish.Formats(), " or ")},
			&cli.StringFlag{Name: "manifest-format", Usage: "machine-os-images manifest `TYPE`: v2s2 (Docker manifest list, default) or oci (OCI index)"},
			&cli.StringFlag{Name: "base-image", Usage: "machine-os-images: put /coreos on top of this image (`REF`, pulled per platform)"},
			&cli.StringFlag{Name: "oci-layout", Usage: "also keep the OCI image layout in `DIR` (tagged --tag)"},
			&cli.StringFlag{Name: "tag", Value: "latest", Usage: "tag of the index in the OCI layout"},
		}, registryFlags()...),
		Action: runPublish,
	}
}

func runPublish(ctx context.Context, cmd *cli.Command) error {
	dirs := cmd.Args().Slice()
	if len(dirs) == 0 {
		return errors.New("publish: no output directory given (usage: publish OUTDIR… --to REF)")
	}
	if cmd.String("to") == "" && cmd.String("oci-layout") == "" {
		return errors.New("publish: --to REF is required (or --oci-layout DIR to only write a layout)")
	}
	source, err := sourceOptionsFromCmd(cmd)
	if err != nil {
		return err
	}
	// Zero (unset) lets the layout take the newest stream's last-modified.
	var created time.Time
	if n, set, err := envSourceDateEpoch(); err != nil {
		return err
	} else if set {
		created = time.Unix(n, 0).UTC()
	}
	res, err := publish.Publish(ctx, dirs, publish.Options{
		LayoutOptions: publish.LayoutOptions{
			Format:         cmd.String("format"),
			ManifestFormat: cmd.String("manifest-format"),
			BaseImage:      cmd.String("base-image"),
			Created:        created,
			Registry:       publish.RegistryOptions{Source: source, ReportWriter: stderr(cmd)},
		},
		To:        cmd.String("to"),
		LayoutDir: cmd.String("oci-layout"),
		Tag:       cmd.String("tag"),
	})
	if err != nil {
		return err
	}
	if res.Pushed != "" {
		fmt.Fprintf(stdout(cmd), "%s@%s\n", res.Pushed, res.Digest)
	} else {
		fmt.Fprintf(stdout(cmd), "oci:%s:%s@%s\n", res.LayoutDir, cmd.String("tag"), res.Digest)
	}
	return nil
}
