package squashfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/okd-project/scos-builder/internal/fstree"
)

const invalidFragment = 0xffffffff

// fileData records where a regular file's data went.
type fileData struct {
	size       int64
	start      int64    // image offset of the first block
	blocks     []uint32 // on-disk size words; 0 is a hole
	fragIndex  uint32
	fragOffset uint32
	sparse     int64 // bytes in holes
}

// dataBlock is one unit of work in the data pipeline: a file block or a
// fragment block.
type dataBlock struct {
	in     []byte // uncompressed data (pooled)
	out    []byte // compressed data (pooled), or in when stored raw
	size   uint32 // on-disk size word
	sparse bool
	raw    bool // stored uncompressed: out is in
	frag   bool
	first  bool // first block of file: its position is the file's start
	file   *fileData
	index  int
	err    error
	done   chan struct{}
}

type fragmentEntry struct {
	start int64
	size  uint32
}

type regularFile struct {
	path string
	ino  *fstree.Inode
}

// writeData writes the data blocks and fragments of files, in order, and
// returns where each inode's data went. A producer reads blocks, a bounded
// pool compresses them, and this goroutine writes them in submission order,
// so output is deterministic and at most a few blocks per worker are held
// in memory.
func (b *builder) writeData(ctx context.Context, files []regularFile) (map[*fstree.Inode]*fileData, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bs := b.opts.BlockSize
	inPool := sync.Pool{New: func() any { return make([]byte, bs) }}
	outPool := sync.Pool{New: func() any { return make([]byte, 0, bs+bs/16+64) }}

	ordered := make(chan *dataBlock, 4*b.opts.Workers+4)
	work := make(chan *dataBlock, b.opts.Workers)
	var wg sync.WaitGroup
	for range b.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for blk := range work {
				out, err := b.comp.compress(outPool.Get().([]byte), blk.in)
				switch {
				case err != nil:
					blk.err = err
				case len(out) < len(blk.in):
					blk.out = out
					blk.size = uint32(len(out))
				default:
					outPool.Put(out[:0]) //nolint:staticcheck // slices are fine in a pool here
					blk.out = blk.in
					blk.raw = true
					blk.size = uint32(len(blk.in)) | blockUncompressed
				}
				close(blk.done)
			}
		}()
	}

	result := map[*fstree.Inode]*fileData{}
	var prodErr error
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		defer close(ordered)
		defer wg.Wait()
		defer close(work)
		p := producer{b: b, ctx: ctx, ordered: ordered, work: work, inPool: &inPool, result: result}
		prodErr = p.run(files)
	}()

	var writeErr error
	for blk := range ordered {
		if writeErr != nil {
			continue // drain after a failure
		}
		<-blk.done
		if blk.err != nil {
			writeErr = fmt.Errorf("compressing data: %w", blk.err)
			cancel()
			continue
		}
		if blk.first {
			blk.file.start = b.out.pos
		}
		switch {
		case blk.frag:
			b.fragments = append(b.fragments, fragmentEntry{start: b.out.pos, size: blk.size})
			b.out.write(blk.out)
		case blk.sparse:
			blk.file.blocks[blk.index] = 0
		default:
			blk.file.blocks[blk.index] = blk.size
			b.out.write(blk.out)
		}
		if b.out.err != nil {
			writeErr = b.out.close()
			cancel()
		}
		if blk.out != nil && !blk.raw {
			outPool.Put(blk.out[:0]) //nolint:staticcheck
		}
		if blk.in != nil && cap(blk.in) == bs {
			inPool.Put(blk.in[:bs]) //nolint:staticcheck
		}
	}
	<-prodDone
	if writeErr != nil {
		return nil, writeErr
	}
	if prodErr != nil {
		return nil, prodErr
	}
	return result, nil
}

type producer struct {
	b       *builder
	ctx     context.Context
	ordered chan<- *dataBlock
	work    chan<- *dataBlock
	inPool  *sync.Pool
	result  map[*fstree.Inode]*fileData
	// frag is the fragment block being filled.
	frag      []byte
	fragCount uint32
	byDigest  map[string]*fileData
	zero      []byte
}

func (p *producer) submit(blk *dataBlock, compress bool) error {
	select {
	case p.ordered <- blk:
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
	if compress {
		select {
		case p.work <- blk:
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
	} else {
		close(blk.done)
	}
	return nil
}

func (p *producer) run(files []regularFile) error {
	p.byDigest = map[string]*fileData{}
	p.zero = make([]byte, p.b.opts.BlockSize)
	for _, f := range files {
		if err := p.file(f); err != nil {
			return err
		}
	}
	return p.flushFragment()
}

func (p *producer) flushFragment() error {
	if len(p.frag) == 0 {
		return nil
	}
	blk := &dataBlock{in: p.frag, frag: true, done: make(chan struct{})}
	p.frag = nil
	p.fragCount++
	return p.submit(blk, true)
}

// addFragment packs a file tail into the current fragment block.
func (p *producer) addFragment(fd *fileData, tail []byte) error {
	bs := p.b.opts.BlockSize
	if len(p.frag)+len(tail) > bs {
		if err := p.flushFragment(); err != nil {
			return err
		}
	}
	if p.frag == nil {
		p.frag = p.inPool.Get().([]byte)[:0]
	}
	fd.fragIndex = p.fragCount
	fd.fragOffset = uint32(len(p.frag))
	p.frag = append(p.frag, tail...)
	return nil
}

func (p *producer) file(f regularFile) error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	c := f.ino.Content
	var size int64
	digest := ""
	if c != nil {
		size = c.Size()
		digest = c.Digest()
	}
	if size < 0 {
		return fmt.Errorf("file %s has negative size %d", f.path, size)
	}
	if digest != "" {
		if fd, ok := p.byDigest[digest]; ok && fd.size == size {
			p.result[f.ino] = fd
			return nil
		}
	}
	fd := &fileData{size: size, fragIndex: invalidFragment}
	p.result[f.ino] = fd
	if digest != "" {
		p.byDigest[digest] = fd
	}
	if size == 0 {
		return nil
	}
	bs := int64(p.b.opts.BlockSize)
	full := size / bs
	tail := size % bs
	useFrag := tail > 0 && (!p.b.opts.NoTailPacking || size < bs)
	nblocks := full
	if tail > 0 && !useFrag {
		nblocks++
	}
	fd.blocks = make([]uint32, nblocks)

	if _, ok := c.(fstree.ZeroContent); ok {
		if nblocks > 0 {
			fd.sparse = min(size, nblocks*bs)
			if err := p.submit(&dataBlock{sparse: true, first: true, file: fd, done: make(chan struct{})}, false); err != nil {
				return err
			}
		}
		if useFrag {
			return p.addFragment(fd, p.zero[:tail])
		}
		return nil
	}

	r, err := c.Open()
	if err != nil {
		return fmt.Errorf("opening %s: %w", f.path, err)
	}
	defer r.Close()
	for i := int64(0); i < nblocks; i++ {
		n := bs
		if i == full {
			n = tail
		}
		buf := p.inPool.Get().([]byte)[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return readError(f.path, err)
		}
		blk := &dataBlock{in: buf, file: fd, index: int(i), first: i == 0, done: make(chan struct{})}
		if bytes.Equal(buf, p.zero[:n]) {
			blk.sparse = true
			fd.sparse += n
			if err := p.submit(blk, false); err != nil {
				return err
			}
			continue
		}
		if err := p.submit(blk, true); err != nil {
			return err
		}
	}
	if useFrag {
		buf := p.inPool.Get().([]byte)[:tail]
		if _, err := io.ReadFull(r, buf); err != nil {
			return readError(f.path, err)
		}
		err := p.addFragment(fd, buf)
		p.inPool.Put(buf[:cap(buf)]) //nolint:staticcheck
		if err != nil {
			return err
		}
	}
	return nil
}

func readError(path string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("reading %s: content is shorter than its size", path)
	}
	return fmt.Errorf("reading %s: %w", path, err)
}
