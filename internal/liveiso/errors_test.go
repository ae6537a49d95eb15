package liveiso

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/liveiso/liveisotest"
	"github.com/okd-project/scos-builder/internal/testutil"
)

func TestValidateIgnition(t *testing.T) {
	for _, ok := range []string{
		`{"ignition": {"version": "3.0.0"}}`,
		`{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/hostname", "contents": {"source": "data:,node1"}}]}}`,
		`{"ignition": {"version": "3.5.0"}}`,
	} {
		if _, err := ValidateIgnition([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for name, tc := range map[string]struct{ config, want string }{
		"syntax":     {"{\n  \"ignition\": {\"version\": \"3.0.0\"\n", "(line 3, column 1)"},
		"relative":   {"{\"ignition\": {\"version\": \"3.4.0\"},\n\"storage\": {\"files\": [{\"path\": \"etc/x\"}]}}", "$.storage.files.0.path (line 2, column 32): path not absolute"},
		"version":    {`{"ignition": {"version": "3.9.0"}}`, "unsupported config version"},
		"spec 2":     {`{"ignition": {"version": "2.2.0"}}`, "unsupported config version"},
		"empty":      {``, "not a config (empty)"},
		"wrong type": {`{"ignition": {"version": 3}}`, "(line 1, column 27)"},
		"bad token":  {"{\"ignition\": {\"version\": \"3.0.0\"},\n \"x\": }", "(line 2, column"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ValidateIgnition([]byte(tc.config))
			var ie *IgnitionError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an IgnitionError containing %q", err, tc.want)
			}
		})
	}
	warn, err := ValidateIgnition([]byte(`{"ignition": {"version": "3.4.0"}, "bogus": 1}`))
	if err != nil || len(warn) != 1 || !strings.Contains(warn[0], "unused key bogus") {
		t.Errorf("warnings %q, %v", warn, err)
	}
}

// A config that does not fit is refused before anything is written.
func TestConfigTooLarge(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	orig := sha(t, fx.Path)
	iso := mustOpen(t, fx.Path, true)
	big := make([]byte, 300000)
	rand.Read(big)
	err := iso.EmbedIgnition(big, false)
	var tooSmall *AreaTooSmallError
	if !errors.As(err, &tooSmall) || tooSmall.Have != 262144 || tooSmall.Need <= 262144 ||
		!strings.Contains(err.Error(), "needs ") || !strings.Contains(err.Error(), "the area holds 262144") {
		t.Fatalf("got %v", err)
	}
	if iso.Modified() {
		t.Error("a refused embed staged a change")
	}
	if err := iso.Save(); err != nil {
		t.Fatal(err)
	}
	if sha(t, fx.Path) != orig {
		t.Error("the ISO changed")
	}
}

func TestNotALiveISO(t *testing.T) {
	testutil.RequireTool(t, "genisoimage")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "images"), 0o755)
	os.WriteFile(filepath.Join(tree, "images", "other.img"), []byte("x"), 0o644)
	plain := filepath.Join(dir, "plain.iso")
	if out, err := exec.Command("genisoimage", "-quiet", "-R", "-J", "-V", "PLAIN", "-o", plain, tree).CombinedOutput(); err != nil {
		t.Fatalf("genisoimage: %v: %s", err, out)
	}
	_, err := Open(plain)
	if err == nil || !strings.Contains(err.Error(), "not a CoreOS live ISO") || !strings.Contains(err.Error(), "IMAGES/IGNITION.IMG") {
		t.Errorf("plain ISO: %v", err)
	}

	// igninfo.json naming a file that is missing
	os.MkdirAll(filepath.Join(tree, "coreos"), 0o755)
	os.WriteFile(filepath.Join(tree, "coreos", "igninfo.json"), []byte(`{"file": "images/cdboot.img"}`), 0o644)
	if out, err := exec.Command("genisoimage", "-quiet", "-R", "-J", "-o", filepath.Join(dir, "ign.iso"), tree).CombinedOutput(); err != nil {
		t.Fatalf("genisoimage: %v: %s", err, out)
	}
	_, err = Open(filepath.Join(dir, "ign.iso"))
	if err == nil || !strings.Contains(err.Error(), "IMAGES/CDBOOT.IMG, which is missing") {
		t.Errorf("igninfo.json to a missing file: %v", err)
	}

	// not an ISO at all
	junk := filepath.Join(dir, "junk.iso")
	os.WriteFile(junk, make([]byte, 40000), 0o644)
	if _, err := Open(junk); err == nil || !strings.Contains(err.Error(), "not an ISO9660 image") {
		t.Errorf("zero file: %v", err)
	}
	os.WriteFile(junk, []byte("short"), 0o644)
	if _, err := Open(junk); err == nil {
		t.Error("short file opened")
	}
	if _, err := Open(filepath.Join(dir, "missing.iso")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// MakeReadOnly makes path unwritable even for root (chattr +i), or with
// chmod for other users; the returned error says if it cannot.
func makeReadOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		return
	}
	testutil.RequireTool(t, "chattr")
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		testutil.SkipOrFail(t, "chattr +i %s: %v: %s", path, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

func TestReadOnlyISO(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	makeReadOnly(t, fx.Path)
	if _, err := OpenForUpdate(fx.Path); !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "for writing") {
		t.Fatalf("opening a read-only ISO for update: %v", err)
	}
	iso := mustOpen(t, fx.Path, false)
	if err := iso.EmbedIgnition([]byte(testConfig), false); err != nil {
		t.Fatal(err)
	}
	if err := iso.Save(); err == nil {
		t.Error("Save on a read-only ISO succeeded")
	}
	out := filepath.Join(t.TempDir(), "out.iso")
	if err := iso.SaveAs(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := mustOpen(t, out, false).IgnitionConfig(); string(cfg) != testConfig {
		t.Errorf("copy of a read-only ISO: %q", cfg)
	}
}

// A failed copy leaves nothing at the output path.
func TestSaveAsFailureLeavesNothing(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	iso := mustOpen(t, fx.Path, false)
	if err := iso.EmbedIgnition([]byte(testConfig), false); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.iso")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := iso.SaveAs(ctx, out); !errors.Is(err, context.Canceled) {
		t.Errorf("SaveAs with a cancelled context: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("cancelled copy left behind: %v", ents)
	}
	iso.f.Close() // reading the input now fails midway
	if err := iso.SaveAs(context.Background(), out); err == nil {
		t.Fatal("SaveAs with a closed input succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}
