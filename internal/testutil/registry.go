package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
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

	"github.com/okd-project/scos-builder/internal/logtail"
	"golang.org/x/crypto/bcrypt"
)

// RegistryOptions configures StartDockerRegistry.
type RegistryOptions struct {
	// TLS serves HTTPS with a certificate for 127.0.0.1 signed by a CA
	// generated for this registry (see DockerRegistry.CertDir); otherwise
	// the registry speaks plain HTTP.
	TLS bool
	// User and Password, when User is set, turn on htpasswd (bcrypt) auth
	// for every request.
	User, Password string
}

// DockerRegistry is Debian's docker-registry (distribution 2.8) serving on
// 127.0.0.1, with its storage in a temporary directory.
type DockerRegistry struct {
	Addr           string // host:port
	User, Password string // as given in RegistryOptions
	// CAPEM is the CA certificate (TLS only).
	CAPEM []byte
	// CertDir holds ca.crt, usable as a containers --cert-dir (TLS only).
	CertDir string
}

// StartDockerRegistry starts docker-registry on a free loopback port and
// waits until it answers /v2/; it is stopped when the test ends. It skips
// (fails under CI) when docker-registry is not installed.
func StartDockerRegistry(t testing.TB, opts RegistryOptions) *DockerRegistry {
	t.Helper()
	bin := RequireTool(t, "docker-registry")[0]
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &DockerRegistry{Addr: ln.Addr().String(), User: opts.User, Password: opts.Password}
	ln.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), r.Addr)
	if opts.TLS {
		r.CertDir = filepath.Join(dir, "certs")
		crt, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
		r.CAPEM = writeTestCA(t, r.CertDir, crt, key)
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", crt, key)
	}
	if opts.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(opts.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: test\n    path: %s\n", htpasswd)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "registry.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// docker-registry reads REGISTRY_* variables as configuration overrides.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REGISTRY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	client := &http.Client{Transport: r.Transport(), Timeout: 2 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("docker-registry did not come up on %s: %v\n%s", r.Addr, err, logtail.Last(string(out), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the registry's base URL: http:// or https:// and Addr.
func (r *DockerRegistry) URL() string {
	if r.CAPEM != nil {
		return "https://" + r.Addr
	}
	return "http://" + r.Addr
}

// Transport is an HTTP transport that trusts the registry's CA.
func (r *DockerRegistry) Transport() http.RoundTripper {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.CAPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.CAPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return tr
}

// AuthFile writes a containers auth file (the OpenShift pull-secret shape:
// auths with auth and email) holding user and password for the registry,
// and returns its path.
func (r *DockerRegistry) AuthFile(t testing.TB, user, password string) string {
	t.Helper()
	doc := map[string]any{"auths": map[string]any{r.Addr: map[string]string{
		"auth":  base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
		"email": "dev@example.com",
	}}}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeTestCA generates a CA (written as certDir/ca.crt) and a server
// certificate for 127.0.0.1 signed by it (crt, key), valid for an hour
// either side of now. It returns the CA certificate as PEM.
func writeTestCA(t testing.TB, certDir, crt, key string) []byte {
	t.Helper()
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scos-builder test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for path, data := range map[string][]byte{
		filepath.Join(certDir, "ca.crt"): caPEM,
		crt:                              pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		key:                              pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caPEM
}
