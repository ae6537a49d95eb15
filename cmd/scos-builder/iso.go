package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/internal/liveiso"
)

// isoCommand is `scos-builder iso`: customize CoreOS live ISOs in place or
// as a copy, with the commands, flags and exit status of coreos-installer's
// `iso ignition` and `iso kargs` where they overlap.
func isoCommand() *cli.Command {
	outputFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the ISO to `PATH` (\"-\" for stdout) instead of modifying it in place"}
	}
	return &cli.Command{
		Name:  "iso",
		Usage: "customize a CoreOS live ISO (Ignition config, kernel arguments)",
		Commands: []*cli.Command{
			{
				Name:  "ignition",
				Usage: "embed, show or remove the live Ignition config",
				Commands: []*cli.Command{
					{
						Name:      "embed",
						Usage:     "embed an Ignition config in the ISO",
						ArgsUsage: "ISO",
						Flags: []cli.Flag{
							&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "overwrite an existing Ignition config"},
							&cli.StringFlag{Name: "ignition-file", Aliases: []string{"i"}, Usage: "Ignition config to embed (default: stdin)"},
							&cli.BoolFlag{Name: "no-validate", Usage: "embed the config without parsing and validating it"},
							outputFlag(),
						},
						Action: ignitionEmbed,
					},
					{
						Name:      "show",
						Usage:     "print the embedded Ignition config",
						ArgsUsage: "ISO",
						Action:    ignitionShow,
					},
					{
						Name:      "remove",
						Usage:     "remove the embedded Ignition config",
						ArgsUsage: "ISO",
						Flags:     []cli.Flag{outputFlag()},
						Action: func(ctx context.Context, cmd *cli.Command) error {
							return editISO(ctx, cmd, func(iso *liveiso.ISO) error { return iso.RemoveIgnition() })
						},
					},
				},
			},
			{
				Name:  "kargs",
				Usage: "show or change the live kernel arguments",
				Commands: []*cli.Command{
					{
						Name:      "show",
						Usage:     "print the kernel arguments",
						ArgsUsage: "ISO",
						Flags:     []cli.Flag{&cli.BoolFlag{Name: "default", Aliases: []string{"d"}, Usage: "print the default kernel arguments"}},
						Action:    kargsShow,
					},
					{
						Name:                      "modify",
						Usage:                     "append, delete or replace kernel arguments",
						ArgsUsage:                 "ISO",
						DisableSliceFlagSeparator: true, // "-a mitigations=auto,nosmt" is one karg
						Flags: []cli.Flag{
							&cli.StringSliceFlag{Name: "append", Aliases: []string{"a"}, Usage: "kernel argument `KARG` to append"},
							&cli.StringSliceFlag{Name: "delete", Aliases: []string{"d"}, Usage: "kernel argument `KARG` to delete"},
							&cli.StringSliceFlag{Name: "replace", Aliases: []string{"r"}, Usage: "kernel argument to replace, as `KARG=OLDVAL=NEWVAL`"},
							outputFlag(),
						},
						Action: kargsModify,
					},
					{
						Name:      "reset",
						Usage:     "restore the default kernel arguments",
						ArgsUsage: "ISO",
						Flags:     []cli.Flag{outputFlag()},
						Action: func(ctx context.Context, cmd *cli.Command) error {
							return editISO(ctx, cmd, func(iso *liveiso.ISO) error {
								if iso.Kargs == nil {
									return liveiso.ErrNoKargs
								}
								return iso.SetKargs(iso.Kargs.Default)
							})
						},
					},
				},
			},
			{
				Name:      "inspect",
				Usage:     "describe the ISO: volume ID, embed areas, features, El Torito entries",
				ArgsUsage: "ISO",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action:    inspect,
			},
		},
	}
}

// isoArg returns the single ISO argument.
func isoArg(cmd *cli.Command) (string, error) {
	args := cmd.Args().Slice()
	if len(args) != 1 {
		return "", fmt.Errorf("%s: want exactly one ISO argument, got %d", cmd.FullName(), len(args))
	}
	return args[0], nil
}

// openISOArg opens the command's one ISO argument read-only and returns it
// with its path.
func openISOArg(cmd *cli.Command) (*liveiso.ISO, string, error) {
	path, err := isoArg(cmd)
	if err != nil {
		return nil, "", err
	}
	iso, err := liveiso.Open(path)
	return iso, path, err
}

// editISO opens the ISO, applies edit and writes the result: in place, to
// the -o path, or to stdout for "-o -".
func editISO(ctx context.Context, cmd *cli.Command, edit func(*liveiso.ISO) error) error {
	path, err := isoArg(cmd)
	if err != nil {
		return err
	}
	out := cmd.String("output")
	var iso *liveiso.ISO
	if out == "" {
		iso, err = liveiso.OpenForUpdate(path)
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%w; write a modified copy with -o", err)
		}
	} else {
		iso, err = liveiso.Open(path)
	}
	if err != nil {
		return err
	}
	defer iso.Close()
	if err := edit(iso); err != nil {
		return err
	}
	switch out {
	case "":
		return iso.Save()
	case "-":
		w := stdout(cmd)
		if isTerminal(w) {
			return errors.New("refusing to write binary data to a terminal")
		}
		if _, err := iso.Stream(ctx, w); err != nil {
			return fmt.Errorf("writing ISO to stdout: %w", err)
		}
		return nil
	default:
		return iso.SaveAs(ctx, out)
	}
}

// isTerminal reports whether w is a character device other than /dev/null.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}

func ignitionEmbed(ctx context.Context, cmd *cli.Command) error {
	if _, err := isoArg(cmd); err != nil {
		return err
	}
	var config []byte
	var err error
	src := cmd.String("ignition-file")
	if src != "" {
		config, err = os.ReadFile(src)
	} else {
		src = "stdin"
		config, err = io.ReadAll(stdin(cmd))
	}
	if err != nil {
		return fmt.Errorf("reading Ignition config from %s: %w", src, err)
	}
	if !cmd.Bool("no-validate") {
		warnings, err := liveiso.ValidateIgnition(config)
		for _, w := range warnings {
			fmt.Fprintf(stderr(cmd), "%s: %s\n", src, w)
		}
		if err != nil {
			return fmt.Errorf("validating %s (skip with --no-validate): %w", src, err)
		}
	}
	return editISO(ctx, cmd, func(iso *liveiso.ISO) error {
		err := iso.EmbedIgnition(config, cmd.Bool("force"))
		if errors.Is(err, liveiso.ErrAlreadyEmbedded) {
			return fmt.Errorf("%w; use -f to force", err)
		}
		return err
	})
}

func ignitionShow(ctx context.Context, cmd *cli.Command) error {
	iso, _, err := openISOArg(cmd)
	if err != nil {
		return err
	}
	defer iso.Close()
	config, ok := iso.IgnitionConfig()
	if !ok {
		return errors.New("no embedded Ignition config")
	}
	if _, err := stdout(cmd).Write(config); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

func kargsShow(ctx context.Context, cmd *cli.Command) error {
	iso, _, err := openISOArg(cmd)
	if err != nil {
		return err
	}
	defer iso.Close()
	if iso.Kargs == nil {
		return liveiso.ErrNoKargs
	}
	k := iso.Kargs.Current
	if cmd.Bool("default") {
		k = iso.Kargs.Default
	}
	_, err = fmt.Fprintln(stdout(cmd), k)
	return err
}

func kargsModify(ctx context.Context, cmd *cli.Command) error {
	edit := liveiso.KargsEdit{
		Append:  cmd.StringSlice("append"),
		Delete:  cmd.StringSlice("delete"),
		Replace: cmd.StringSlice("replace"),
	}
	return editISO(ctx, cmd, func(iso *liveiso.ISO) error {
		if iso.Kargs == nil {
			return liveiso.ErrNoKargs
		}
		k, err := edit.Apply(iso.Kargs.Current)
		if err != nil {
			return err
		}
		return iso.SetKargs(k)
	})
}

// inspection is the JSON form of `iso inspect`.
type inspection struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	VolumeID string `json:"volume_id"`
	Ignition struct {
		liveiso.IgnitionArea
		Customized bool     `json:"customized"`
		Members    []string `json:"members"`
	} `json:"ignition"`
	Kargs *struct {
		*liveiso.KargsAreas
		Customized bool `json:"customized"`
	} `json:"kargs"`
	Features *liveiso.Features   `json:"features"`
	ElTorito []liveiso.BootEntry `json:"el_torito"`
}

func inspect(ctx context.Context, cmd *cli.Command) error {
	iso, path, err := openISOArg(cmd)
	if err != nil {
		return err
	}
	defer iso.Close()
	var r inspection
	r.Path, r.Size, r.VolumeID = path, iso.Size, iso.VolumeID
	r.Ignition.IgnitionArea = iso.Ignition
	r.Ignition.Members = iso.Initrd().Paths()
	r.Ignition.Customized = !iso.Initrd().Empty()
	if iso.Kargs != nil {
		r.Kargs = &struct {
			*liveiso.KargsAreas
			Customized bool `json:"customized"`
		}{iso.Kargs, iso.Kargs.Current != iso.Kargs.Default}
	}
	r.Features = iso.Features
	if r.ElTorito, err = iso.BootEntries(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	w := stdout(cmd)
	if cmd.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	yesNo := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(&b, "Volume ID:      %s\n", r.VolumeID)
	fmt.Fprintf(&b, "Size:           %d bytes\n", r.Size)
	ig := r.Ignition
	fmt.Fprintf(&b, "Ignition area:  %s, offset %d, length %d (file offset %d)\n", ig.File, ig.Offset, ig.Length, ig.FileOffset)
	fmt.Fprintf(&b, "  customized:   %s", yesNo[ig.Customized])
	if ig.Customized {
		fmt.Fprintf(&b, " (%s)", strings.Join(ig.Members, ", "))
	}
	b.WriteString("\n")
	if k := r.Kargs; k != nil {
		fmt.Fprintf(&b, "Karg areas:     %d bytes each%s\n", k.Size, map[bool]string{true: " (legacy coreKarg header)"}[k.Legacy])
		for _, a := range k.Areas {
			name := a.File
			if name == "" {
				name = "(system area header)"
			}
			fmt.Fprintf(&b, "  %s, offset %d (file offset %d)\n", name, a.Offset, a.FileOffset)
		}
		fmt.Fprintf(&b, "  default:      %s\n", k.Default)
		fmt.Fprintf(&b, "  current:      %s\n", k.Current)
		fmt.Fprintf(&b, "  customized:   %s\n", yesNo[k.Customized])
	} else {
		b.WriteString("Karg areas:     none\n")
	}
	if f := r.Features; f != nil {
		var names []string
		if f.InstallerConfig {
			names = append(names, "installer-config")
		}
		if f.LiveInitrdNetwork {
			names = append(names, "live-initrd-network")
		}
		if len(f.InstallerConfigDirectives) > 0 {
			names = append(names, fmt.Sprintf("installer-config-directives (%d)", len(f.InstallerConfigDirectives)))
		}
		fmt.Fprintf(&b, "Features:       %s\n", strings.Join(names, ", "))
	} else {
		b.WriteString("Features:       none (no coreos/features.json)\n")
	}
	b.WriteString("El Torito:")
	if len(r.ElTorito) == 0 {
		b.WriteString("      none")
	}
	b.WriteString("\n")
	for i, e := range r.ElTorito {
		fmt.Fprintf(&b, "  %d: %s, bootable %s, emulation %s, load %d sectors, LBA %d %s\n",
			i+1, e.Platform, yesNo[e.Bootable], e.Emulation, e.LoadSectors, e.LBA, e.File)
	}
	_, err = io.WriteString(w, b.String())
	return err
}
