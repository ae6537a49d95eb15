package bootconfig

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

// TestFeaturesJSONMatchesFCOS derives features.json from coreos-installer's
// example config and compares bytes with the FCOS 38 ISO's. That ISO was
// built before the secure-ipl directive existed, so that key is dropped
// from the newer example config first.
func TestFeaturesJSONMatchesFCOS(t *testing.T) {
	example, err := os.ReadFile(filepath.Join(testutil.SharedFixtures(t, "live-iso"), "coreos-installer-example-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(testutil.SharedFixtures(t, "live-iso/fcos-38-x86_64"), "coreos/features.json"))
	if err != nil {
		t.Fatal(err)
	}
	newer := regexp.MustCompile(`(?m)^secure-ipl:.*\n`)
	if n := len(newer.FindAll(example, -1)); n != 1 {
		t.Fatalf("example config has %d secure-ipl keys, want 1", n)
	}
	root := t.TempDir()
	if err := writeFile(root, InstallerExampleConfig, newer.ReplaceAll(example, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	got, warning, err := FeaturesJSON(root)
	if err != nil || warning != "" {
		t.Fatalf("FeaturesJSON: %v %q", err, warning)
	}
	if string(got) != string(want) {
		t.Errorf("features.json:\n%s\nwant:\n%s", got, want)
	}

	// Without the example config: no directives, and a warning.
	got, warning, err = FeaturesJSON(t.TempDir())
	if err != nil || !strings.Contains(warning, "missing") || !strings.Contains(string(got), `"installer-config-directives": {}`) {
		t.Errorf("FeaturesJSON without config = %s, %q, %v", got, warning, err)
	}
}
