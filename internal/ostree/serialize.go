package ostree

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// importHeader is the first line of a serialized ImportResult.
type importHeader struct {
	Commit         string            `json:"commit"`
	BaseCommit     string            `json:"baseCommit"`
	Labels         map[string]string `json:"labels"`
	ImageRef       string            `json:"imageRef"`
	ManifestDigest string            `json:"manifestDigest"`
	ConfigDigest   string            `json:"configDigest"`
	Timestamp      int64             `json:"timestamp"`
	Refs           map[string]string `json:"refs"`
	Stats          ImportStats       `json:"stats"`
}

// Encode writes the import result to w so a later stage can Decode it
// against the same content store: one JSON header line, then the repo
// and root trees as one fstree encoding (shared inodes stay shared).
func (r *ImportResult) Encode(w io.Writer) error {
	bw := bufio.NewWriter(w)
	h := importHeader{Commit: r.Commit, BaseCommit: r.BaseCommit, Labels: r.Labels, ImageRef: r.ImageRef,
		ManifestDigest: r.ManifestDigest, ConfigDigest: r.ConfigDigest, Timestamp: r.Timestamp, Refs: r.Refs, Stats: r.Stats}
	if err := json.NewEncoder(bw).Encode(h); err != nil {
		return fmt.Errorf("encoding import result: %w", err)
	}
	both := fstree.New()
	both.Root.Entries["repo"] = r.Repo.Root
	both.Root.Entries["root"] = r.Root.Root
	if err := fstree.Encode(bw, both); err != nil {
		return fmt.Errorf("encoding import result: %w", err)
	}
	return bw.Flush()
}

// DecodeImportResult reads what Encode wrote; contents are resolved in store.
func DecodeImportResult(r io.Reader, store *fstree.Store) (*ImportResult, error) {
	dec := json.NewDecoder(r)
	var h importHeader
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("decoding import result header: %w", err)
	}
	both, err := fstree.Decode(io.MultiReader(dec.Buffered(), r), store.Resolve)
	if err != nil {
		return nil, fmt.Errorf("decoding import result: %w", err)
	}
	repo, root := both.Root.Entries["repo"], both.Root.Entries["root"]
	if repo == nil || root == nil || repo.Kind != fstree.KindDir || root.Kind != fstree.KindDir {
		return nil, errors.New("decoding import result: repo or root tree missing")
	}
	return &ImportResult{Commit: h.Commit, BaseCommit: h.BaseCommit, Labels: h.Labels, ImageRef: h.ImageRef,
		ManifestDigest: h.ManifestDigest, ConfigDigest: h.ConfigDigest, Timestamp: h.Timestamp, Refs: h.Refs,
		Stats: h.Stats, Repo: &fstree.Tree{Root: repo}, Root: &fstree.Tree{Root: root}}, nil
}
