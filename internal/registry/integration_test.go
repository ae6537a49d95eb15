package registry

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/okd-project/scos-builder/internal/testutil"
)

func TestDockerRegistryTLSAndAuth(t *testing.T) {
	reg := testutil.StartDockerRegistry(t, testutil.RegistryOptions{TLS: true, User: "builder", Password: "s3cret"})
	ref, _ := name.ParseReference(reg.Addr + "/scos/node:1")
	img := randomImage(t, 2)
	if err := remote.Write(ref, img, remote.WithTransport(reg.Transport()),
		remote.WithAuth(&authn.Basic{Username: "builder", Password: "s3cret"})); err != nil {
		t.Fatalf("pushing: %v", err)
	}
	ctx := context.Background()
	wantDigest, _ := img.Digest()
	// trusting verifies TLS against the registry's CA.
	trusting := func() Options {
		opts := testOptions()
		opts.TLSVerify = true
		opts.CertDir = reg.CertDir
		return opts
	}

	t.Run("right credentials", func(t *testing.T) {
		opts := trusting()
		opts.AuthFile = reg.AuthFile(t, "builder", "s3cret")
		got, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest.String() != wantDigest.String() || len(got.Layers) != 2 {
			t.Errorf("got %s with %d layers, want %s with 2", got.Digest, len(got.Layers), wantDigest)
		}
	})
	t.Run("credentials from REGISTRY_AUTH_FILE", func(t *testing.T) {
		t.Setenv("REGISTRY_AUTH_FILE", reg.AuthFile(t, "builder", "s3cret"))
		opts := trusting()
		if _, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("credentials from ~/.docker/config.json", func(t *testing.T) {
		home := isolateCredentials(t)
		os.Mkdir(filepath.Join(home, ".docker"), 0o700)
		data, _ := os.ReadFile(reg.AuthFile(t, "builder", "wrong"))
		dockerConfig := filepath.Join(home, ".docker", "config.json")
		os.WriteFile(dockerConfig, data, 0o600)
		opts := trusting()
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), "were read from "+dockerConfig) {
			t.Fatalf("wrong credentials in %s: got %v", dockerConfig, err)
		}
		data, _ = os.ReadFile(reg.AuthFile(t, "builder", "s3cret"))
		os.WriteFile(dockerConfig, data, 0o600)
		if _, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		opts := trusting()
		opts.AuthFile = reg.AuthFile(t, "builder", "wrong")
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), opts.AuthFile) || !strings.Contains(err.Error(), reg.Addr) {
			t.Fatalf("got %v, want an error naming %s and %s", err, opts.AuthFile, reg.Addr)
		}
		t.Logf("wrong credentials: %v", err)
	})
	t.Run("no credentials", func(t *testing.T) {
		isolateCredentials(t)
		opts := trusting()
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), "no credentials for "+reg.Addr) {
			t.Fatalf("got %v, want an error saying no credentials were found", err)
		}
		t.Logf("no credentials: %v", err)
	})
	t.Run("unknown CA without --tls-verify=false", func(t *testing.T) {
		opts := testOptions()
		opts.TLSVerify = true
		opts.AuthFile = reg.AuthFile(t, "builder", "s3cret")
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("got %v, want a certificate error", err)
		}
	})
	t.Run("tls-verify=false", func(t *testing.T) {
		opts := testOptions()
		opts.TLSVerify = false
		opts.AuthFile = reg.AuthFile(t, "builder", "s3cret")
		got, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest.String() != wantDigest.String() {
			t.Errorf("got %s, want %s", got.Digest, wantDigest)
		}
	})
}

// isolateCredentials points HOME and the other places containers look for
// credentials at an empty directory, which it returns.
func isolateCredentials(t *testing.T) string {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_RUNTIME_DIR", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("DOCKER_CONFIG", "")
	t.Setenv("REGISTRY_AUTH_FILE", "")
	return home
}

// TestContainersStorageInput copies an image into a temporary vfs
// containers-storage root with skopeo and reads it back.
func TestContainersStorageInput(t *testing.T) {
	skopeo := testutil.RequireTool(t, "skopeo")[0]
	testutil.RequireRoot(t)
	dir := t.TempDir()
	img := randomImage(t, 2)
	reg := newTestRegistry(t)
	src := reg.push(t, "scos/node:1", img)
	store := fmt.Sprintf("containers-storage:[vfs@%s/root+%s/run]localhost/scos/node:1", dir, dir)
	out, err := exec.Command(skopeo, "copy", "--quiet", "--src-tls-verify=false", "docker://"+src, store).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// vfs layers may be read-only directories; make them removable.
		exec.Command("chmod", "-R", "u+w", dir).Run()
	})
	got, err := Fetch(context.Background(), store, t.TempDir(), testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if len(got.Layers) != 2 {
		t.Fatalf("got %d layers", len(got.Layers))
	}
	for i, l := range got.Layers {
		// The store keeps uncompressed layers: the blob is the diff itself.
		if l.DiffID.String() != cf.RootFS.DiffIDs[i].String() || sha256File(t, l.Path) != l.DiffID.String() {
			t.Errorf("layer %d: diffID %s, blob %s, want %s", i, l.DiffID, sha256File(t, l.Path), cf.RootFS.DiffIDs[i])
		}
	}
}

// TestLocalTransports reads the same image through dir:, oci-archive: and
// docker-archive:, written by skopeo.
func TestLocalTransports(t *testing.T) {
	skopeo := testutil.RequireTool(t, "skopeo")[0]
	reg := newTestRegistry(t)
	img := randomImage(t, 2)
	src := reg.push(t, "scos/node:1", img)
	cf, _ := img.ConfigFile()
	dir := t.TempDir()
	cache := t.TempDir()
	for _, dst := range []string{
		"dir:" + filepath.Join(dir, "d"),
		"oci-archive:" + filepath.Join(dir, "o.tar"),
		"docker-archive:" + filepath.Join(dir, "d.tar"),
	} {
		out, err := exec.Command(skopeo, "copy", "--quiet", "--src-tls-verify=false", "docker://"+src, dst).CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo copy to %s: %v: %s", dst, err, out)
		}
		got, err := Fetch(context.Background(), dst, cache, testOptions(), nil)
		if err != nil {
			t.Errorf("%s: %v", dst, err)
			continue
		}
		if len(got.Layers) != 2 || got.Layers[1].DiffID.String() != cf.RootFS.DiffIDs[1].String() {
			t.Errorf("%s: layers %+v", dst, got.Layers)
		}
	}
}
