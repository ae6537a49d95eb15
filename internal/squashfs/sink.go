package squashfs

import (
	"fmt"
	"io"
)

// sink writes the image sequentially through a buffer into an io.WriterAt.
type sink struct {
	w    io.WriterAt
	base int64 // where the image starts in w
	pos  int64 // image bytes written (including buffered)
	buf  []byte
	err  error
}

const sinkBuffer = 1 << 20

func newSink(w io.WriterAt, base, start int64) *sink {
	return &sink{w: w, base: base, pos: start, buf: make([]byte, 0, sinkBuffer)}
}

func (s *sink) write(p []byte) {
	if s.err != nil {
		return
	}
	if len(s.buf)+len(p) > cap(s.buf) {
		s.flush()
		if len(p) >= cap(s.buf) {
			_, s.err = s.w.WriteAt(p, s.base+s.pos)
			s.pos += int64(len(p))
			return
		}
	}
	s.buf = append(s.buf, p...)
	s.pos += int64(len(p))
}

func (s *sink) flush() {
	if s.err != nil || len(s.buf) == 0 {
		s.buf = s.buf[:0]
		return
	}
	_, s.err = s.w.WriteAt(s.buf, s.base+s.pos-int64(len(s.buf)))
	s.buf = s.buf[:0]
}

func (s *sink) close() error {
	s.flush()
	if s.err != nil {
		return fmt.Errorf("writing image: %w", s.err)
	}
	return nil
}
