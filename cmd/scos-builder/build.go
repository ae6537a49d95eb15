package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/liveiso"
	"github.com/okd-project/scos-builder/internal/payload"
	"github.com/okd-project/scos-builder/internal/registry"
	"github.com/okd-project/scos-builder/internal/stream"
	"github.com/okd-project/scos-builder/recipes"
	"github.com/okd-project/scos-builder/stages"
)

// planFlags are shared by build and plan: they decide what is built.
func planFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "payload", Usage: "OpenShift/OKD release `IMAGE` whose OS image to build from"},
		&cli.StringFlag{Name: "image", Usage: "ostree/bootc OS container `IMAGE` to build from (instead of --payload); any transport: docker://, oci:, oci-archive:, containers-storage:…"},
		&cli.StringFlag{Name: "os-tag", Usage: "with --payload: use the OS image of release `TAG` instead of looking it up"},
		&cli.StringFlag{Name: "recipe", Usage: "recipe `NAME`: " + strings.Join(recipes.Names(), ", ") + " (default: detected from the payload tag or the image's com.coreos.osname label)"},
		&cli.StringSliceFlag{Name: "karg", Usage: "append kernel argument `K` to the live kernel command line (repeatable)"},
		&cli.StringFlag{Name: "ignition", Usage: "embed the Ignition config `FILE` into the ISO (validated first)"},
		&cli.StringFlag{Name: "rootfs-builder", Value: "native", Usage: "how to write the live rootfs: native (no root needed) or mksquashfs (runs as root on a materialized tree)"},
		&cli.StringFlag{Name: "rootfs-fstype", Usage: "override the image's live-rootfs-fstype: squashfs or erofs"},
		&cli.StringFlag{Name: "syslinux-dir", Usage: "take the BIOS boot files (isolinux.bin, *.c32, isohdpfx.bin) from `DIR`"},
		&cli.BoolFlag{Name: "allow-no-efi", Usage: "build a BIOS-only ISO when the image has no EFI binaries (default: refuse)"},
		&cli.StringFlag{Name: "release", Usage: "the build id in artifact names and the stream (default: the image's org.opencontainers.image.version label, else the payload's machine-os version)"},
		&cli.StringFlag{Name: "base-url", Usage: "prefix the stream's artifact locations with `URL/` (default: bare file names)"},
	}
	return append(flags, sourceFlags()...)
}

func buildCommand() *cli.Command {
	flags := append(planFlags(),
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: ".", Usage: "write the artifacts and the stream JSON into `DIR`"},
		&cli.StringFlag{Name: "stop-after", Usage: "stop after stage `STAGE` (its output stays in the cache; nothing is published)"},
		&cli.BoolFlag{Name: "keep-work", Usage: "keep each stage's scratch directory and print where it is"},
		jsonFlag,
	)
	return &cli.Command{
		Name:      "build",
		Usage:     "build the live ISO, PXE artifacts and stream JSON from a release payload or an OS image",
		UsageText: "scos-builder build --payload RELEASE-IMAGE [options]\nscos-builder build --image OS-IMAGE [options]",
		Description: `Resolves the OS image (from the payload's image-references), plans the stages,
runs those whose outputs are not cached, and copies the artifacts into -o:
  <prefix>-<release>-live-iso.<arch>.iso, -live-kernel.<arch>,
  -live-initramfs.<arch>.img, -live-rootfs.<arch>.img and <prefix>.json.
The output paths are printed on stdout (--json: as JSON). Timestamps come from
SOURCE_DATE_EPOCH, else the OS image's creation time.`,
		Flags:  flags,
		Action: runBuild,
	}
}

func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "print the stages a build would run, with cache keys and cached/to-build status",
		UsageText: "scos-builder plan --payload RELEASE-IMAGE [options]",
		Flags:     append(planFlags(), jsonFlag),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			p, err := planBuild(ctx, cmd)
			if err != nil {
				return err
			}
			defer p.client.Close()
			return printPlan(cmd, p.cfg, p.plan)
		},
	}
}

type planJSON struct {
	OSImage string          `json:"os-image"`
	Recipe  string          `json:"recipe"`
	Arch    string          `json:"arch"`
	Release string          `json:"release"`
	Stages  []planStageJSON `json:"stages"`
}

type planStageJSON struct {
	Type    string            `json:"type"`
	Version int               `json:"version"`
	Key     string            `json:"key"`
	Cached  bool              `json:"cached"`
	Inputs  map[string]string `json:"inputs,omitempty"`
	Tools   map[string]string `json:"tools,omitempty"`
	Options builder.Options   `json:"options"`
}

func printPlan(cmd *cli.Command, cfg *stages.Config, plan *builder.Plan) error {
	if cmd.Bool("json") {
		out := planJSON{OSImage: cfg.OSImage, Recipe: cfg.Recipe.Name, Arch: cfg.Arch, Release: cfg.Release}
		for _, s := range plan.Steps {
			out.Stages = append(out.Stages, planStageJSON{Type: s.Stage.Type(), Version: s.Stage.Version(), Key: s.Key,
				Cached: s.Cached, Inputs: s.InputKeys, Tools: s.ToolVersions, Options: s.Stage.Options()})
		}
		return printJSON(cmd, out)
	}
	w := stdout(cmd)
	fmt.Fprintf(w, "OS image: %s\nrecipe:   %s\narch:     %s\nrelease:  %s\n\n", cfg.OSImage, cfg.Recipe.Name, cfg.Arch, cfg.Release)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tKEY\tSTATUS")
	for _, s := range plan.Steps {
		status := "to build"
		if s.Cached {
			status = "cached"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Stage.Type(), s.Key[:16], status)
	}
	return tw.Flush()
}

func stageStoreDir(cmd *cli.Command) string {
	return filepath.Join(cmd.String("cache-dir"), "stages")
}

// resolveBuild is the resolve phase: every network look-up that decides
// what is built happens here, before planning.
func resolveBuild(ctx context.Context, cmd *cli.Command) (*stages.Config, *registry.Client, error) {
	payloadRef, imageRef := cmd.String("payload"), cmd.String("image")
	if (payloadRef == "") == (imageRef == "") {
		return nil, nil, errors.New("give exactly one of --payload RELEASE-IMAGE or --image OS-IMAGE")
	}
	if cmd.String("os-tag") != "" && payloadRef == "" {
		return nil, nil, errors.New("--os-tag needs --payload")
	}
	if b := cmd.String("rootfs-builder"); b != "native" && b != "mksquashfs" {
		return nil, nil, fmt.Errorf("unknown --rootfs-builder %q (valid: native, mksquashfs)", b)
	}
	if t := cmd.String("rootfs-fstype"); t != "" && !contains(recipes.FSTypes, t) {
		return nil, nil, fmt.Errorf("unknown --rootfs-fstype %q (valid: %s)", t, strings.Join(recipes.FSTypes, ", "))
	}
	opts, err := sourceOptionsFromCmd(cmd)
	if err != nil {
		return nil, nil, err
	}
	if opts.Arch == "" {
		opts.Arch = hostArch()
	}
	arch, err := registry.RPMArch(opts.Arch)
	if err != nil {
		return nil, nil, fmt.Errorf("--arch: %w", err)
	}
	cfg := &stages.Config{Payload: payloadRef, Arch: arch, Kargs: cmd.StringSlice("karg"),
		RootfsBuilder: cmd.String("rootfs-builder"), RootfsFSType: cmd.String("rootfs-fstype"),
		SyslinuxDir: cmd.String("syslinux-dir"), AllowNoEFI: cmd.Bool("allow-no-efi"), BaseURL: cmd.String("base-url"), Version: version}
	if cfg.BaseURL != "" && !strings.HasSuffix(cfg.BaseURL, "/") {
		cfg.BaseURL += "/"
	}
	if f := cmd.String("ignition"); f != "" {
		if cfg.Ignition, err = readIgnitionForBuild(f); err != nil {
			return nil, nil, err
		}
	}
	client, err := registry.New(opts, blobCacheDir(cmd))
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			client.Close()
		}
	}()
	cfg.Client = client
	recipeName := cmd.String("recipe")
	if recipeName != "" {
		if _, err := recipes.Get(recipeName); err != nil {
			return nil, nil, err
		}
	}
	machineOS := ""
	if payloadRef != "" {
		tags, err := recipeTags()
		if err != nil {
			return nil, nil, err
		}
		res, err := payload.Resolve(ctx, client, payloadRef, payload.Options{OSTag: cmd.String("os-tag"), Recipe: recipeName, Recipes: tags})
		if err != nil {
			return nil, nil, err
		}
		cfg.Resolved, cfg.OSImage, machineOS = res, res.OSImage, res.MachineOSVersion
		if recipeName == "" {
			recipeName = res.Recipe
		}
	} else {
		cfg.OSImage = imageRef
	}
	info, err := client.Inspect(ctx, cfg.OSImage)
	if err != nil {
		return nil, nil, err
	}
	if err := checkOstreeContainer(cfg.OSImage, info.Labels); err != nil {
		return nil, nil, err
	}
	cfg.OSImageDigest, cfg.Labels = string(info.InstanceDigest), info.Labels
	if recipeName == "" {
		recipeName = recipeForLabels(info.Labels)
	}
	if cfg.Recipe, err = recipes.Get(recipeName); err != nil {
		return nil, nil, err
	}
	if cfg.Release = cmd.String("release"); cfg.Release == "" {
		if cfg.Release, err = stream.ReleaseFor(info.Labels, machineOS); err != nil {
			return nil, nil, fmt.Errorf("finding the release of %s: %w", cfg.OSImage, err)
		}
	}
	if cfg.SourceDateEpoch, err = sourceDateEpoch(info.Created.Unix()); err != nil {
		return nil, nil, err
	}
	ok = true
	return cfg, client, nil
}

// checkOstreeContainer refuses images that are not ostree containers before
// anything is fetched.
func checkOstreeContainer(ref string, labels map[string]string) error {
	if labels["ostree.bootable"] == "" && labels["containers.bootc"] != "1" {
		return fmt.Errorf("%s is not an ostree container image (no ostree.bootable or containers.bootc label): pass the OS image (e.g. the payload's stream-coreos tag) or a release payload with --payload", ref)
	}
	return nil
}

// recipeForLabels picks the recipe whose osname the image's
// com.coreos.osname label names; scos when it names none.
func recipeForLabels(labels map[string]string) string {
	all, err := recipes.All()
	if err == nil {
		for _, r := range all {
			if r.OSName == labels["com.coreos.osname"] {
				return r.Name
			}
		}
	}
	slog.Debug("no recipe matches the image's com.coreos.osname label; using scos", "osname", labels["com.coreos.osname"])
	return "scos"
}

// sourceDateEpoch is SOURCE_DATE_EPOCH, else the image's creation time.
func sourceDateEpoch(created int64) (int64, error) {
	if n, set, err := envSourceDateEpoch(); err != nil || set {
		return n, err
	}
	if created < 0 {
		created = 0
	}
	return created, nil
}

// envSourceDateEpoch reads SOURCE_DATE_EPOCH; set is false when it is unset
// or empty.
func envSourceDateEpoch() (n int64, set bool, err error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a non-negative number of seconds", v)
	}
	return n, true, nil
}

func hostArch() string {
	switch runtime.GOARCH {
	case "arm64":
		return "aarch64"
	case "amd64":
		return "x86_64"
	}
	return runtime.GOARCH
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// plannedBuild is a resolved build and its plan against the stage store.
type plannedBuild struct {
	cfg    *stages.Config
	client *registry.Client
	store  *builder.Store
	plan   *builder.Plan
}

// planBuild runs the resolve phase and plans the stages.
func planBuild(ctx context.Context, cmd *cli.Command) (*plannedBuild, error) {
	cfg, client, err := resolveBuild(ctx, cmd)
	if err != nil {
		return nil, err
	}
	store, err := builder.OpenStore(stageStoreDir(cmd))
	if err == nil {
		var plan *builder.Plan
		if plan, err = builder.NewPlan(stages.New(cfg), &builder.HostTools{}, store); err == nil {
			return &plannedBuild{cfg: cfg, client: client, store: store, plan: plan}, nil
		}
	}
	client.Close()
	return nil, err
}

type buildResult struct {
	Outputs []string `json:"outputs"`
	Stream  string   `json:"stream,omitempty"`
	Ran     []string `json:"ran"`
	Cached  []string `json:"cached"`
}

func runBuild(ctx context.Context, cmd *cli.Command) error {
	p, err := planBuild(ctx, cmd)
	if err != nil {
		return err
	}
	defer p.client.Close()
	cfg, store, plan := p.cfg, p.store, p.plan
	// mkfs.erofs is needed only when the image asks for an erofs rootfs.
	if err := plan.CheckTools(cmd.String("stop-after"), "mkfs.erofs"); err != nil {
		return err
	}
	rep, err := builder.NewReporter(cmd.String("progress"), stderr(cmd))
	if err != nil {
		return err
	}
	res, err := builder.Run(ctx, store, plan, builder.RunOptions{
		StopAfter: cmd.String("stop-after"), KeepWork: cmd.Bool("keep-work"), Reporter: rep,
	})
	rep.Close()
	if err != nil {
		return fmt.Errorf("building from %s: %w", cfg.OSImage, err)
	}
	out := buildResult{Ran: res.Ran}
	for _, s := range plan.Steps {
		if s.Cached {
			out.Cached = append(out.Cached, s.Stage.Type())
		}
	}
	if stop := cmd.String("stop-after"); stop != "" {
		out.Outputs = []string{res.OutDirs[stop]}
	} else {
		dir := res.OutDirs[stages.TypeStreamEmit]
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var outputs []builder.Output
		for _, e := range entries {
			outputs = append(outputs, builder.Output{Name: e.Name(), Path: filepath.Join(dir, e.Name())})
		}
		sort.Slice(outputs, func(i, j int) bool { return outputs[i].Name < outputs[j].Name })
		if out.Outputs, err = builder.PublishOutputs(cmd.String("output"), outputs); err != nil {
			return err
		}
		out.Stream = filepath.Join(cmd.String("output"), stream.FileName(cfg.Recipe.ArtifactPrefix))
	}
	if cmd.Bool("json") {
		return printJSON(cmd, out)
	}
	for _, p := range out.Outputs {
		fmt.Fprintln(stdout(cmd), p)
	}
	return nil
}

// readIgnitionForBuild reads and validates the --ignition config, so a bad
// config fails before anything is built.
func readIgnitionForBuild(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading Ignition config: %w", err)
	}
	warnings, err := liveiso.ValidateIgnition(data)
	if err != nil {
		return nil, fmt.Errorf("validating Ignition config %s: %w", path, err)
	}
	for _, w := range warnings {
		slog.Warn("Ignition config", "file", path, "warning", w)
	}
	return data, nil
}
