package builder

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// Reporter receives the engine's progress events. Implementations draw
// bars on a terminal, print plain lines, or emit json-seq records; stages
// only ever see a StageReporter bound to their name.
type Reporter interface {
	StageStart(stage string, cached bool)
	StageProgress(stage, msg string, done, total int64)
	StageMessage(stage, msg string)
	StageDone(stage string, elapsed time.Duration, err error)
	// Close flushes the reporter; call it once at the end.
	Close()
}

// ProgressModes are the values of --progress.
var ProgressModes = []string{"auto", "tty", "plain", "json"}

// NewReporter returns the reporter for a --progress mode writing to w.
// "auto" draws bars when w is a terminal and prints plain lines otherwise.
func NewReporter(mode string, w io.Writer) (Reporter, error) {
	switch mode {
	case "auto", "":
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return newTTYReporter(w), nil
		}
		return &plainReporter{w: w}, nil
	case "tty":
		return newTTYReporter(w), nil
	case "plain":
		return &plainReporter{w: w}, nil
	case "json":
		return &jsonReporter{w: w}, nil
	}
	return nil, fmt.Errorf("unknown progress mode %q (valid: %s)", mode, strings.Join(ProgressModes, ", "))
}

// stageReporter binds a Reporter to one stage.
type stageReporter struct {
	r     Reporter
	stage string
}

func (s stageReporter) Progress(msg string, done, total int64) {
	s.r.StageProgress(s.stage, msg, done, total)
}

func (s stageReporter) Message(format string, args ...any) {
	s.r.StageMessage(s.stage, fmt.Sprintf(format, args...))
}

// plainReporter prints one line per event, and progress at most every
// 10% or 5 seconds per stage so CI logs stay short.
type plainReporter struct {
	mu   sync.Mutex
	w    io.Writer
	last map[string]progressMark
}

type progressMark struct {
	at      time.Time
	percent int64
}

func (p *plainReporter) printf(format string, args ...any) {
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *plainReporter) StageStart(stage string, cached bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cached {
		p.printf("%s: cached", stage)
		return
	}
	p.printf("%s: running", stage)
}

func (p *plainReporter) StageProgress(stage, msg string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]progressMark{}
	}
	now := time.Now()
	pct := int64(-1)
	if total > 0 {
		pct = done * 100 / total
	}
	m, seen := p.last[stage]
	if seen && now.Sub(m.at) < 5*time.Second && (pct < 0 || pct-m.percent < 10) && done != total {
		return
	}
	p.last[stage] = progressMark{at: now, percent: pct}
	if total > 0 {
		p.printf("%s: %s %d/%d (%d%%)", stage, msg, done, total, pct)
	} else {
		p.printf("%s: %s %d", stage, msg, done)
	}
}

func (p *plainReporter) StageMessage(stage, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printf("%s: %s", stage, msg)
}

func (p *plainReporter) StageDone(stage string, elapsed time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.printf("%s: failed after %s", stage, elapsed.Round(time.Millisecond))
		return
	}
	p.printf("%s: done in %s", stage, elapsed.Round(time.Millisecond))
}

func (p *plainReporter) Close() {}

// jsonReporter writes RFC 7464 json-seq records (RS, JSON, LF).
type jsonReporter struct {
	mu sync.Mutex
	w  io.Writer
}

// Event is one json-seq progress record.
type Event struct {
	Time    time.Time `json:"time"`
	Stage   string    `json:"stage"`
	Event   string    `json:"event"` // start, cached, progress, message, done, failed
	Message string    `json:"message,omitempty"`
	Done    int64     `json:"done,omitempty"`
	Total   int64     `json:"total,omitempty"`
	Seconds float64   `json:"seconds,omitempty"`
	Error   string    `json:"error,omitempty"`
}

func (j *jsonReporter) emit(e Event) {
	e.Time = time.Now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.w.Write(append(append([]byte{0x1e}, b...), '\n'))
}

func (j *jsonReporter) StageStart(stage string, cached bool) {
	ev := "start"
	if cached {
		ev = "cached"
	}
	j.emit(Event{Stage: stage, Event: ev})
}

func (j *jsonReporter) StageProgress(stage, msg string, done, total int64) {
	j.emit(Event{Stage: stage, Event: "progress", Message: msg, Done: done, Total: total})
}

func (j *jsonReporter) StageMessage(stage, msg string) {
	j.emit(Event{Stage: stage, Event: "message", Message: msg})
}

func (j *jsonReporter) StageDone(stage string, elapsed time.Duration, err error) {
	e := Event{Stage: stage, Event: "done", Seconds: elapsed.Seconds()}
	if err != nil {
		e.Event, e.Error = "failed", err.Error()
	}
	j.emit(e)
}

func (j *jsonReporter) Close() {}

// ttyReporter draws one mpb bar per running stage, as podman does for
// layer copies; messages scroll above the bars.
type ttyReporter struct {
	mu   sync.Mutex
	p    *mpb.Progress
	bars map[string]*mpb.Bar
}

func newTTYReporter(w io.Writer) *ttyReporter {
	return &ttyReporter{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(40)), bars: map[string]*mpb.Bar{}}
}

func (t *ttyReporter) StageStart(stage string, cached bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cached {
		fmt.Fprintf(t.p, "%s: cached\n", stage)
		return
	}
	t.bars[stage] = t.p.AddBar(0,
		mpb.PrependDecorators(decor.Name(stage, decor.WC{W: 18, C: decor.DindentRight})),
		mpb.AppendDecorators(decor.OnComplete(decor.Percentage(decor.WC{W: 5}), "done")),
	)
}

func (t *ttyReporter) StageProgress(stage, msg string, done, total int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.bars[stage]; ok {
		if total > 0 {
			b.SetTotal(total, false)
		}
		b.SetCurrent(done)
	}
}

func (t *ttyReporter) StageMessage(stage, msg string) {
	fmt.Fprintf(t.p, "%s: %s\n", stage, msg)
}

func (t *ttyReporter) StageDone(stage string, elapsed time.Duration, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.bars[stage]
	if !ok {
		return
	}
	delete(t.bars, stage)
	if err != nil {
		b.Abort(false)
		return
	}
	b.SetTotal(-1, true)
}

func (t *ttyReporter) Close() {
	t.mu.Lock()
	for _, b := range t.bars {
		b.Abort(false)
	}
	t.mu.Unlock()
	t.p.Wait()
}
