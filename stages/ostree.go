package stages

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/ostree"
)

// Files in the ostree.import and sysroot.deploy outputs.
const (
	ContentDir  = "content"
	ImportFile  = "import.tree"
	SysrootFile = "sysroot.tree"
	DeployFile  = "deploy.json"
)

// OstreeImportOptions decide the repository the import writes.
type OstreeImportOptions struct {
	// ImageRef names the merge commit's ref (ostree/container/image/…).
	ImageRef string `json:"image-ref"`
	// Importer is the importer's version, written into the merge commit.
	Importer string `json:"importer"`
}

// Validate implements builder.Options.
func (o OstreeImportOptions) Validate() error { return nil }

// OstreeImport streams the image's layers into ostree objects: contents to
// a content store, metadata to a virtual tree.
type OstreeImport struct{ Opts OstreeImportOptions }

func (s *OstreeImport) Type() string             { return TypeOstreeImport }
func (s *OstreeImport) Version() int             { return 1 }
func (s *OstreeImport) Options() builder.Options { return s.Opts }
func (s *OstreeImport) Inputs() []string         { return []string{TypeImageFetch} }
func (s *OstreeImport) Tools() []string          { return nil }

func (s *OstreeImport) Run(ctx context.Context, rc *builder.RunContext) error {
	img, err := ReadFetched(rc.Inputs[TypeImageFetch])
	if err != nil {
		return err
	}
	config, err := os.ReadFile(filepath.Join(img.CacheDir, "blobs", img.ConfigDigest.Algorithm().String(), img.ConfigDigest.Encoded()))
	if err != nil {
		return fmt.Errorf("reading image config: %w", err)
	}
	oimg := ostree.Image{Ref: s.Opts.ImageRef, Manifest: img.Manifest, Config: config}
	var total int64
	for _, l := range img.Layers {
		path := l.Path
		oimg.Layers = append(oimg.Layers, ostree.Layer{Digest: string(l.Digest), DiffID: string(l.DiffID),
			Open: func() (io.ReadCloser, error) { return os.Open(path) }})
		total += l.Size
	}
	store, err := fstree.OpenStore(filepath.Join(rc.OutDir, ContentDir))
	if err != nil {
		return err
	}
	rc.Progress.Message("importing %d layers (%d MiB)", len(img.Layers), total>>20)
	res, err := ostree.Import(ctx, oimg, store, rc.Log)
	if err != nil {
		return err
	}
	rc.Progress.Message("commit %s: %d content objects, %d derived entries, %d files labelled from their parent directory",
		res.Commit, res.Stats.ContentObjects, res.Stats.DerivedEntries, res.Stats.InheritedLabels)
	return writeEncoded(filepath.Join(rc.OutDir, ImportFile), res.Encode)
}

// readImport decodes the ostree.import output in dir.
func readImport(dir string) (*ostree.ImportResult, error) {
	store, err := fstree.OpenStore(filepath.Join(dir, ContentDir))
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, ImportFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ostree.DecodeImportResult(bufio.NewReader(f), store)
}

// SysrootDeployOptions decide the deployment.
type SysrootDeployOptions struct {
	// OSName is the stateroot.
	OSName string `json:"osname"`
	// ImageRef goes into the origin file.
	ImageRef string `json:"image-ref"`
	// Kargs are the BLS entry options before ostree=.
	Kargs           []string `json:"kargs"`
	SourceDateEpoch int64    `json:"source-date-epoch"`
}

// Validate implements builder.Options.
func (o SysrootDeployOptions) Validate() error {
	if o.OSName == "" || strings.ContainsAny(o.OSName, "/ ") {
		return fmt.Errorf("invalid stateroot name %q", o.OSName)
	}
	return nil
}

// SysrootDeploy lays out the physical sysroot of the merge commit as
// ostree admin deploy would.
type SysrootDeploy struct{ Opts SysrootDeployOptions }

func (s *SysrootDeploy) Type() string             { return TypeSysrootDeploy }
func (s *SysrootDeploy) Version() int             { return 1 }
func (s *SysrootDeploy) Options() builder.Options { return s.Opts }
func (s *SysrootDeploy) Inputs() []string         { return []string{TypeOstreeImport} }
func (s *SysrootDeploy) Tools() []string          { return nil }

func (s *SysrootDeploy) Run(ctx context.Context, rc *builder.RunContext) error {
	imp, err := readImport(rc.Inputs[TypeOstreeImport])
	if err != nil {
		return fmt.Errorf("reading import: %w", err)
	}
	store, err := fstree.OpenStore(filepath.Join(rc.OutDir, ContentDir))
	if err != nil {
		return err
	}
	tree, info, err := ostree.Deploy(imp, ostree.DeployOptions{OSName: s.Opts.OSName, ImageRef: s.Opts.ImageRef,
		Kargs: s.Opts.Kargs, BootKernelLinks: true, SourceDateEpoch: s.Opts.SourceDateEpoch, Store: store})
	if err != nil {
		return err
	}
	rc.Progress.Message("deployed %s as %s (kernel %s, bootcsum %s)", info.Commit, info.DeployPath, info.KernelVersion, info.Bootcsum)
	if err := writeJSON(rc.OutDir, DeployFile, info); err != nil {
		return err
	}
	return writeEncoded(filepath.Join(rc.OutDir, SysrootFile), func(w io.Writer) error { return fstree.Encode(w, tree) })
}

// Sysroot is a decoded sysroot.deploy output.
type Sysroot struct {
	Tree *fstree.Tree
	Info ostree.DeployInfo
}

// ReadSysroot decodes the sysroot tree of a sysroot.deploy output, whose
// contents live in its own store and in the import's.
func ReadSysroot(deployDir, importDir string) (*Sysroot, error) {
	var sr Sysroot
	if err := readJSON(deployDir, DeployFile, &sr.Info); err != nil {
		return nil, err
	}
	var stores []*fstree.Store
	for _, d := range []string{deployDir, importDir} {
		st, err := fstree.OpenStore(filepath.Join(d, ContentDir))
		if err != nil {
			return nil, err
		}
		stores = append(stores, st)
	}
	f, err := os.Open(filepath.Join(deployDir, SysrootFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sr.Tree, err = fstree.Decode(bufio.NewReader(f), func(digest string, size int64) (fstree.Content, error) {
		var errs []error
		for _, st := range stores {
			c, err := st.Resolve(digest, size)
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	})
	if err != nil {
		return nil, fmt.Errorf("reading sysroot: %w", err)
	}
	return &sr, nil
}

// DeployedRoot returns the deployment's own filesystem (usr, etc…) inside
// the sysroot.
func (s *Sysroot) DeployedRoot() (*fstree.Tree, error) {
	ino, err := s.Tree.Lookup(s.Info.DeployPath)
	if err != nil {
		return nil, fmt.Errorf("finding deployment %s: %w", s.Info.DeployPath, err)
	}
	return &fstree.Tree{Root: ino}, nil
}

// writeEncoded writes a file through an encoder, atomically.
func writeEncoded(path string, encode func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = encode(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return os.Rename(tmp, path)
}
