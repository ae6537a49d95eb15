package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/okd-project/scos-builder/internal/stream"
)

// buildDir writes a one-arch build output directory and returns it.
func buildDir(t *testing.T, arch, release string) string {
	t.Helper()
	dir := t.TempDir()
	names, err := stream.LiveArtifactNames("scos", release, arch)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{names.ISO, names.Kernel, names.Initramfs, names.Rootfs} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("content of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := stream.NewLiveStream(stream.LiveBuild{Dir: dir, Prefix: "scos", Release: release, Arch: arch,
		StreamName: "c10s", GeneratorVersion: "test", SourceDateEpoch: 1700000000})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(filepath.Join(dir, "scos.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runStreamCmd(t *testing.T, cmdArgs ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	var c = streamCommand()
	if cmdArgs[0] == "publish" {
		c = publishCommand()
	}
	c.Writer, c.ErrWriter = &out, &errOut
	err := c.Run(context.Background(), cmdArgs)
	return out.String(), errOut.String(), err
}

func TestStreamMergeAndValidateCommands(t *testing.T) {
	x := filepath.Join(buildDir(t, "x86_64", "10.0.1"), "scos.json")
	a := filepath.Join(buildDir(t, "aarch64", "10.0.1"), "scos.json")
	out := filepath.Join(t.TempDir(), "merged.json")
	if _, _, err := runStreamCmd(t, "stream", "merge", x, a, "-o", out); err != nil {
		t.Fatal(err)
	}
	s, err := stream.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Architectures) != 2 {
		t.Fatalf("merged architectures: %d", len(s.Architectures))
	}
	stdout, _, err := runStreamCmd(t, "stream", "merge", a, x)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(out)
	if stdout != string(file) {
		t.Error("merge to stdout differs from merge -o")
	}
	if _, msg, err := runStreamCmd(t, "stream", "validate", out); err != nil || !strings.Contains(msg, "valid") {
		t.Fatalf("validate: %v %s", err, msg)
	}

	// A second x86_64 build of another release conflicts.
	x2 := filepath.Join(buildDir(t, "x86_64", "10.0.2"), "scos.json")
	_, _, err = runStreamCmd(t, "stream", "merge", x, x2)
	if err == nil || !strings.Contains(err.Error(), "architectures.x86_64.artifacts.metal.release") || !strings.Contains(err.Error(), x2) {
		t.Fatalf("conflicting merge: %v", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	s.Architectures["x86_64"].Artifacts["metal"].Formats["iso"].Disk.Sha256 = "nope"
	if err := s.WriteFile(bad); err != nil {
		t.Fatal(err)
	}
	_, _, err = runStreamCmd(t, "stream", "validate", out, bad)
	if err == nil || !strings.Contains(err.Error(), "architectures.x86_64.artifacts.metal.formats.iso.disk.sha256") {
		t.Fatalf("validate bad stream: %v", err)
	}
	if _, _, err := runStreamCmd(t, "stream", "merge"); err == nil {
		t.Error("merge without files accepted")
	}
}

func TestPublishCommandWritesLayout(t *testing.T) {
	x, a := buildDir(t, "x86_64", "10.0.1"), buildDir(t, "aarch64", "10.0.1")
	layoutDir := filepath.Join(t.TempDir(), "layout")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	stdout, _, err := runStreamCmd(t, "publish", x, a, "--format", "oci-artifact", "--oci-layout", layoutDir, "--tag", "v1")
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	data, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &idx); err != nil || len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Fatalf("layout index: %s (%v)", data, err)
	}
	if want := "oci:" + layoutDir + ":v1@" + idx.Manifests[0].Digest + "\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}

	_, _, err = runStreamCmd(t, "publish", x, "--format", "qcow2", "--oci-layout", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "valid: machine-os-images, oci-artifact") {
		t.Errorf("bad format: %v", err)
	}
	if _, _, err := runStreamCmd(t, "publish", x); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Errorf("no destination: %v", err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "soon")
	if _, _, err := runStreamCmd(t, "publish", x, "--oci-layout", t.TempDir()); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}

func TestPublishCommandTLSFlag(t *testing.T) {
	// A plain-HTTP "registry" on loopback that refuses everyone: it shows
	// whether the push spoke HTTPS (default) or fell back to HTTP
	// (--tls-verify=false), and how an authentication failure is reported.
	var plainRequests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainRequests.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_RUNTIME_DIR", home)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/okd/machine-os-images:x"
	dir := buildDir(t, "x86_64", "10.0.1")

	_, _, err := runStreamCmd(t, "publish", dir, "--to", ref)
	if err == nil || !strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		t.Fatalf("default push to an HTTP registry: %v", err)
	}
	if plainRequests.Load() != 0 {
		t.Fatal("default push spoke plain HTTP")
	}
	_, _, err = runStreamCmd(t, "publish", dir, "--to", ref, "--tls-verify=false")
	if err == nil || !strings.Contains(err.Error(), "pushing "+ref) || !strings.Contains(err.Error(), "--authfile") {
		t.Fatalf("push with --tls-verify=false to a refusing registry: %v", err)
	}
	if plainRequests.Load() == 0 {
		t.Fatal("--tls-verify=false did not reach the registry over HTTP")
	}
}
