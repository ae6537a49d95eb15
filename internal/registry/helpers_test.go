package registry

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// testRegistry is an in-process registry that counts requests.
type testRegistry struct {
	srv   *httptest.Server
	host  string
	mu    sync.Mutex
	paths []string
	blobs atomic.Int64
	all   atomic.Int64
	// failBlobs makes the next N blob GETs answer 503.
	failBlobs atomic.Int64
	// blobDelay slows blob GETs down, to observe parallel transfers.
	blobDelay   time.Duration
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	h := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.all.Add(1)
		if strings.Contains(req.URL.Path, "/blobs/") && req.Method == http.MethodGet {
			r.blobs.Add(1)
			if r.failBlobs.Add(-1) >= 0 {
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
			n := r.inFlight.Add(1)
			defer r.inFlight.Add(-1)
			for {
				m := r.maxInFlight.Load()
				if n <= m || r.maxInFlight.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(r.blobDelay)
		}
		r.mu.Lock()
		r.paths = append(r.paths, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *testRegistry) reset() {
	r.failBlobs.Store(0)
	r.maxInFlight.Store(0)
	r.blobs.Store(0)
	r.all.Store(0)
	r.mu.Lock()
	r.paths = nil
	r.mu.Unlock()
}

func (r *testRegistry) push(t *testing.T, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref.String()
}

func (r *testRegistry) pushIndex(t *testing.T, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref.String()
}

func randomImage(t *testing.T, layers int64) v1.Image {
	t.Helper()
	img, err := random.Image(64<<10, layers)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func testOptions() Options {
	o := DefaultOptions()
	o.TLSVerify = false
	o.RetryDelay = 10 * time.Millisecond
	o.Retries = 1
	return o
}

// recorder is a Reporter that keeps what it was told.
type recorder struct {
	mu       sync.Mutex
	messages []string
	progress int
}

func (r *recorder) Progress(msg string, done, total int64) {
	r.mu.Lock()
	r.progress++
	r.mu.Unlock()
}

func (r *recorder) Message(format string, args ...any) {
	r.mu.Lock()
	r.messages = append(r.messages, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}
