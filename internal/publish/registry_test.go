package publish

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/testutil"
)

// get fetches a registry API path with an Accept header (and basic auth
// when the registry has it).
func registryGet(t *testing.T, r *testutil.DockerRegistry, path, accept string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+r.Addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if r.User != "" {
		req.SetBasicAuth(r.User, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b.String())
	}
	return []byte(b.String())
}
