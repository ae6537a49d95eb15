package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/okd-project/scos-builder/internal/payload"
	"github.com/okd-project/scos-builder/internal/registry"
	"github.com/okd-project/scos-builder/recipes"
	"github.com/urfave/cli/v3"
)

// sourceFlags are the image-source flags shared by every command that
// reads images (payload info, build). They mean what they mean for podman
// and skopeo.
func sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "authfile", Usage: "credentials `FILE` (containers auth.json, Docker config.json or an OpenShift pull secret); default: $REGISTRY_AUTH_FILE, then the containers/Docker standard locations", Sources: cli.EnvVars("REGISTRY_AUTH_FILE")},
		&cli.BoolFlag{Name: "tls-verify", Value: true, Usage: "verify registry TLS certificates and require HTTPS"},
		&cli.StringFlag{Name: "cert-dir", Usage: "`DIR` with *.crt CA certificates (and client *.cert/*.key) for the registry; default: /etc/containers/certs.d/HOST:PORT"},
		&cli.StringFlag{Name: "signature-policy", Usage: "policy.json `FILE`; default: the system policy, or accept anything when none exists"},
		&cli.StringFlag{Name: "registries-conf", Usage: "registries.conf `FILE` (mirrors for disconnected installs)", Sources: cli.EnvVars("CONTAINERS_REGISTRIES_CONF")},
		&cli.StringFlag{Name: "arch", Usage: "`ARCH` to select from manifest lists: x86_64, aarch64, ppc64le, s390x (default: the host's)"},
		&cli.IntFlag{Name: "retry", Value: 3, Usage: "retry transient registry errors `N` times"},
	}
}

// registryFlags are the sourceFlags that apply to any registry access
// (not the architecture choice): publish uses them for its pushes and base
// image pulls.
func registryFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range sourceFlags() {
		if f.Names()[0] != "arch" {
			out = append(out, f)
		}
	}
	return out
}

// sourceOptionsFromCmd reads the sourceFlags of cmd. Debug messages go to
// stderr when a --debug flag (or --log-level=debug) is set anywhere in the
// command's lineage.
func sourceOptionsFromCmd(cmd *cli.Command) (registry.Options, error) {
	o := registry.DefaultOptions()
	o.AuthFile = cmd.String("authfile")
	o.TLSVerify = cmd.Bool("tls-verify")
	o.CertDir = cmd.String("cert-dir")
	o.SignaturePolicy = cmd.String("signature-policy")
	o.RegistriesConf = cmd.String("registries-conf")
	o.Arch = cmd.String("arch")
	o.Retries = int(cmd.Int("retry"))
	if o.Arch != "" {
		if _, err := registry.ParsePlatform(o.Arch); err != nil {
			return o, fmt.Errorf("--arch: %w", err)
		}
	}
	if cmd.Bool("debug") || cmd.String("log-level") == "debug" {
		w := cmd.Root().ErrWriter
		if w == nil {
			w = os.Stderr
		}
		o.Debugf = func(format string, args ...any) { fmt.Fprintf(w, "debug: "+format+"\n", args...) }
	}
	return o, nil
}

// blobCacheDir is the blob cache (an OCI layout) inside --cache-dir.
func blobCacheDir(cmd *cli.Command) string {
	return filepath.Join(cmd.String("cache-dir"), "blobs")
}

// recipeTags lists the built-in recipes' payload tags, scos first: it is
// the OS of OKD payloads, the main input.
func recipeTags() ([]payload.RecipeTags, error) {
	all, err := recipes.All()
	if err != nil {
		return nil, err
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Name == "scos" && all[j].Name != "scos" })
	out := make([]payload.RecipeTags, 0, len(all))
	for _, r := range all {
		out = append(out, payload.RecipeTags{Recipe: r.Name, Tags: r.OSTags})
	}
	return out, nil
}

func payloadCommand() *cli.Command {
	infoFlags := append([]cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		&cli.StringFlag{Name: "os-tag", Usage: "use the OS image of release `TAG` instead of looking it up"},
		&cli.StringFlag{Name: "recipe", Usage: "recipe `NAME` whose OS tags to try (default: detect from the tag found)"},
	}, sourceFlags()...)
	return &cli.Command{
		Name:  "payload",
		Usage: "inspect OpenShift/OKD release payloads",
		Commands: []*cli.Command{{
			Name:      "info",
			Usage:     "show the release version and the OS image a release payload carries",
			ArgsUsage: "RELEASE-IMAGE",
			Flags:     infoFlags,
			Action:    payloadInfo,
		}},
	}
}

func payloadInfo(ctx context.Context, cmd *cli.Command) error {
	if cmd.NArg() != 1 {
		return errors.New("payload info: expected one RELEASE-IMAGE argument (e.g. quay.io/okd/scos-release:4.19.0-okd-scos.1)")
	}
	opts, err := sourceOptionsFromCmd(cmd)
	if err != nil {
		return err
	}
	tags, err := recipeTags()
	if err != nil {
		return err
	}
	client, err := registry.New(opts, blobCacheDir(cmd))
	if err != nil {
		return err
	}
	defer client.Close()
	res, err := payload.Resolve(ctx, client, cmd.Args().First(), payload.Options{
		OSTag:   cmd.String("os-tag"),
		Recipe:  cmd.String("recipe"),
		Recipes: tags,
	})
	if err != nil {
		return err
	}
	w := cmd.Root().Writer
	if w == nil {
		w = os.Stdout
	}
	if cmd.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("Release", res.Version)
	row("Release image", firstNonEmpty(res.ReleaseDigestRef, res.Release))
	row("OS tag", fmt.Sprintf("%s (found by %s)", res.OSTag, res.FoundBy))
	row("OS image", res.OSImage)
	row("OS stream", res.OSStream)
	row("machine-os", res.MachineOSVersion)
	recipe := res.Recipe
	if recipe != "" && res.RecipeDetected {
		recipe += " (detected)"
	}
	row("Recipe", recipe)
	row("machine-os-images", res.MachineOSImages)
	return tw.Flush()
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
