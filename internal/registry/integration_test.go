package registry

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/okd-project/scos-builder/internal/testutil"
	"golang.org/x/crypto/bcrypt"
)

// tlsRegistry is Debian's docker-registry on 127.0.0.1 with a test CA and
// htpasswd auth.
type tlsRegistry struct {
	host    string
	caPEM   []byte
	certDir string // holds ca.crt, as a --cert-dir
}

func writePEM(t *testing.T, path, typ string, der []byte) []byte {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func startTLSRegistry(t *testing.T, user, pass string) *tlsRegistry {
	t.Helper()
	bin := testutil.RequireTool(t, "docker-registry")[0]
	dir := t.TempDir()

	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scos-builder test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	os.Mkdir(certDir, 0o755)
	r := &tlsRegistry{certDir: certDir}
	r.caPEM = writePEM(t, filepath.Join(certDir, "ca.crt"), "CERTIFICATE", caDER)
	writePEM(t, filepath.Join(dir, "server.crt"), "CERTIFICATE", srvDER)
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	writePEM(t, filepath.Join(dir, "server.key"), "EC PRIVATE KEY", keyDER)

	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(hash)+"\n"), 0o600)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.host = l.Addr().String()
	l.Close()
	config := fmt.Sprintf(`version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: %s/data}}
http: {addr: %s, tls: {certificate: %s/server.crt, key: %s/server.key}}
auth: {htpasswd: {realm: test, path: %s/htpasswd}}
`, dir, r.host, dir, dir, dir)
	os.WriteFile(filepath.Join(dir, "config.yml"), []byte(config), 0o644)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", r.host, 100*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatalf("docker-registry did not listen on %s: %s", r.host, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

func (r *tlsRegistry) transport() http.RoundTripper {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.caPEM)
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
}

func writeAuthFile(t *testing.T, host, user, pass string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pull-secret.json")
	// The OpenShift pull-secret shape: auths with auth and email.
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	os.WriteFile(p, []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q,"email":"dev@example.com"}}}`, host, auth)), 0o600)
	return p
}

func TestDockerRegistryTLSAndAuth(t *testing.T) {
	reg := startTLSRegistry(t, "builder", "s3cret")
	ref, _ := name.ParseReference(reg.host + "/scos/node:1")
	img := randomImage(t, 2)
	if err := remote.Write(ref, img, remote.WithTransport(reg.transport()),
		remote.WithAuth(&authn.Basic{Username: "builder", Password: "s3cret"})); err != nil {
		t.Fatalf("pushing: %v", err)
	}
	ctx := context.Background()
	wantDigest, _ := img.Digest()

	t.Run("right credentials", func(t *testing.T) {
		opts := testOptions()
		opts.TLSVerify = true
		opts.CertDir = reg.certDir
		opts.AuthFile = writeAuthFile(t, reg.host, "builder", "s3cret")
		got, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest.String() != wantDigest.String() || len(got.Layers) != 2 {
			t.Errorf("got %s with %d layers, want %s with 2", got.Digest, len(got.Layers), wantDigest)
		}
	})
	t.Run("credentials from REGISTRY_AUTH_FILE", func(t *testing.T) {
		t.Setenv("REGISTRY_AUTH_FILE", writeAuthFile(t, reg.host, "builder", "s3cret"))
		opts := testOptions()
		opts.TLSVerify = true
		opts.CertDir = reg.certDir
		if _, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("credentials from ~/.docker/config.json", func(t *testing.T) {
		home := t.TempDir()
		t.Setenv("HOME", home)
		t.Setenv("XDG_RUNTIME_DIR", home)
		t.Setenv("XDG_CONFIG_HOME", "")
		t.Setenv("DOCKER_CONFIG", "")
		t.Setenv("REGISTRY_AUTH_FILE", "")
		os.Mkdir(filepath.Join(home, ".docker"), 0o700)
		data, _ := os.ReadFile(writeAuthFile(t, reg.host, "builder", "wrong"))
		dockerConfig := filepath.Join(home, ".docker", "config.json")
		os.WriteFile(dockerConfig, data, 0o600)
		opts := testOptions()
		opts.TLSVerify = true
		opts.CertDir = reg.certDir
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), "were read from "+dockerConfig) {
			t.Fatalf("wrong credentials in %s: got %v", dockerConfig, err)
		}
		data, _ = os.ReadFile(writeAuthFile(t, reg.host, "builder", "s3cret"))
		os.WriteFile(dockerConfig, data, 0o600)
		if _, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		opts := testOptions()
		opts.TLSVerify = true
		opts.CertDir = reg.certDir
		opts.AuthFile = writeAuthFile(t, reg.host, "builder", "wrong")
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), opts.AuthFile) || !strings.Contains(err.Error(), reg.host) {
			t.Fatalf("got %v, want an error naming %s and %s", err, opts.AuthFile, reg.host)
		}
		t.Logf("wrong credentials: %v", err)
	})
	t.Run("no credentials", func(t *testing.T) {
		home := t.TempDir()
		t.Setenv("HOME", home)
		t.Setenv("XDG_RUNTIME_DIR", home)
		t.Setenv("XDG_CONFIG_HOME", "")
		t.Setenv("DOCKER_CONFIG", "")
		t.Setenv("REGISTRY_AUTH_FILE", "")
		opts := testOptions()
		opts.TLSVerify = true
		opts.CertDir = reg.certDir
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), "no credentials for "+reg.host) {
			t.Fatalf("got %v, want an error saying no credentials were found", err)
		}
		t.Logf("no credentials: %v", err)
	})
	t.Run("unknown CA without --tls-verify=false", func(t *testing.T) {
		opts := testOptions()
		opts.TLSVerify = true
		opts.AuthFile = writeAuthFile(t, reg.host, "builder", "s3cret")
		_, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("got %v, want a certificate error", err)
		}
	})
	t.Run("tls-verify=false", func(t *testing.T) {
		opts := testOptions()
		opts.TLSVerify = false
		opts.AuthFile = writeAuthFile(t, reg.host, "builder", "s3cret")
		got, err := Fetch(ctx, ref.String(), t.TempDir(), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest.String() != wantDigest.String() {
			t.Errorf("got %s, want %s", got.Digest, wantDigest)
		}
	})
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
