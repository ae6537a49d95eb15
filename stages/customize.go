package stages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/liveiso"
)

// ISOCustomizeOptions are what is embedded into the ISO.
type ISOCustomizeOptions struct {
	// Ignition is the config to embed (already validated by the CLI).
	Ignition string `json:"ignition"`
}

// Validate implements builder.Options.
func (o ISOCustomizeOptions) Validate() error {
	if o.Ignition == "" {
		return errors.New("empty Ignition config")
	}
	_, err := liveiso.ValidateIgnition([]byte(o.Ignition))
	return err
}

// ISOCustomize embeds an Ignition config into a copy of the mastered ISO,
// exactly as `iso ignition embed` would.
type ISOCustomize struct{ Opts ISOCustomizeOptions }

func (s *ISOCustomize) Type() string             { return TypeISOCustomize }
func (s *ISOCustomize) Version() int             { return 1 }
func (s *ISOCustomize) Options() builder.Options { return s.Opts }
func (s *ISOCustomize) Inputs() []string         { return []string{TypeISOMaster} }
func (s *ISOCustomize) Tools() []string          { return nil }

func (s *ISOCustomize) Run(ctx context.Context, rc *builder.RunContext) error {
	dst := filepath.Join(rc.OutDir, ISOFile)
	// A copy, not a link: the embed writes in place and the master's
	// object must stay as it is.
	if err := copyFile(filepath.Join(rc.Inputs[TypeISOMaster], ISOFile), dst); err != nil {
		return fmt.Errorf("copying the ISO: %w", err)
	}
	iso, err := liveiso.OpenForUpdate(dst)
	if err != nil {
		return err
	}
	defer iso.Close()
	if err := iso.EmbedIgnition([]byte(s.Opts.Ignition), false); err != nil {
		return fmt.Errorf("embedding the Ignition config: %w", err)
	}
	return iso.Save()
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
