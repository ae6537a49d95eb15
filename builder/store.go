package builder

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Store is the content-addressed stage cache under the cache directory:
//
//	objects/<key>/out/       the stage's outputs
//	objects/<key>/meta.json  key, type, version, options, inputs, tool versions, duration
//	objects/<key>/log        the stage's full log
//
// An object is written under tmp/ and renamed into objects/ only when the
// stage succeeded, so an interrupted run never leaves a half object that a
// later run would take as cached.
type Store struct {
	dir string
}

// Meta is the content of an object's meta.json.
type Meta struct {
	Key          string            `json:"key"`
	Type         string            `json:"type"`
	Version      int               `json:"version"`
	Options      json.RawMessage   `json:"options"`
	Inputs       map[string]string `json:"inputs,omitempty"`
	ToolVersions map[string]string `json:"tool-versions,omitempty"`
	Created      time.Time         `json:"created"`
	DurationMS   int64             `json:"duration-ms"`
}

// OpenStore opens the store in dir, creating it when needed.
func OpenStore(dir string) (*Store, error) {
	for _, sub := range []string{"objects", "tmp", "logs", "work"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("creating store %s: %w", dir, err)
		}
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's top directory.
func (s *Store) Dir() string { return s.dir }

// ObjectDir is the directory of the object with the given key.
func (s *Store) ObjectDir(key string) string { return filepath.Join(s.dir, "objects", key) }

// OutDir is the output directory of the object with the given key.
func (s *Store) OutDir(key string) string { return filepath.Join(s.ObjectDir(key), "out") }

// Has reports whether a complete object with the given key exists.
func (s *Store) Has(key string) bool {
	_, err := os.Stat(filepath.Join(s.ObjectDir(key), "meta.json"))
	return err == nil
}

// ReadMeta returns the meta.json of an object.
func (s *Store) ReadMeta(key string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(s.ObjectDir(key), "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("reading object %s: %w", key, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding object %s meta.json: %w", key, err)
	}
	return &m, nil
}

// pending is an object being written.
type pending struct {
	store *Store
	key   string
	dir   string
}

func (s *Store) begin(key string) (*pending, error) {
	dir, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), key[:16]+"-")
	if err != nil {
		return nil, fmt.Errorf("creating temporary object: %w", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("creating temporary object: %w", err)
	}
	return &pending{store: s, key: key, dir: dir}, nil
}

func (p *pending) outDir() string  { return filepath.Join(p.dir, "out") }
func (p *pending) logPath() string { return filepath.Join(p.dir, "log") }

// commit writes meta.json and renames the object into place.
func (p *pending) commit(m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding meta.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "meta.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing meta.json: %w", err)
	}
	dst := p.store.ObjectDir(p.key)
	if err := os.Rename(p.dir, dst); err != nil {
		// Another run stored the same key first: its object is as good as ours.
		if p.store.Has(p.key) {
			os.RemoveAll(p.dir)
			return nil
		}
		return fmt.Errorf("storing object %s: %w", p.key, err)
	}
	return nil
}

// abort removes the pending object, keeping its log under logs/ so the
// error can point at it. It returns the kept log's path.
func (p *pending) abort(stageType string) string {
	kept := filepath.Join(p.store.dir, "logs", fmt.Sprintf("%s-%s.log", stageType, p.key[:16]))
	if err := os.Rename(p.logPath(), kept); err != nil && !errors.Is(err, os.ErrNotExist) {
		kept = p.logPath()
		return kept
	}
	os.RemoveAll(p.dir)
	return kept
}
