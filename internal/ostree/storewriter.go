package ostree

import (
	"fmt"
	"sync"

	"github.com/okd-project/scos-builder/internal/fstree"
)

// Small content objects are verified in memory and written to the store
// by a few workers, so file creation latency overlaps with reading the
// layer. Larger objects stream straight into the store.
const (
	parallelMax     = 1 << 20
	storeWorkers    = 4
	storeQueueDepth = 8
)

type storeJob struct {
	ino      *fstree.Inode
	checksum string
	buf      *[]byte // from bufPool; data is (*buf)[:size]
	size     int
}

// bufPool recycles the buffers of small objects between reader and workers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, parallelMax); return &b }}

// storeWriter writes queued contents and sets the inodes' Content; the
// inodes must not be read until wait returns.
type storeWriter struct {
	store *fstree.Store
	jobs  chan storeJob
	wg    sync.WaitGroup
	once  sync.Once
	mu    sync.Mutex
	err   error
}

func newStoreWriter(store *fstree.Store) *storeWriter {
	w := &storeWriter{store: store, jobs: make(chan storeJob, storeQueueDepth)}
	for i := 0; i < storeWorkers; i++ {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for j := range w.jobs {
				c, err := store.PutBytes((*j.buf)[:j.size])
				bufPool.Put(j.buf)
				if err != nil {
					w.mu.Lock()
					if w.err == nil {
						w.err = fmt.Errorf("storing content object %s: %w", j.checksum, err)
					}
					w.mu.Unlock()
					continue
				}
				j.ino.Content = c
			}
		}()
	}
	return w
}

func (w *storeWriter) submit(j storeJob) { w.jobs <- j }

// wait finishes all queued writes and returns the first error.
func (w *storeWriter) wait() error {
	w.once.Do(func() { close(w.jobs) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
