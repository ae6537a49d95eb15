package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testOptions struct {
	Text string `json:"text"`
}

func (o testOptions) Validate() error {
	if strings.Contains(o.Text, "invalid") {
		return errors.New("text must not say invalid")
	}
	return nil
}

// testStage writes its text plus its inputs' contents to out/result.
type testStage struct {
	typ     string
	version int
	opts    testOptions
	inputs  []string
	tools   []string
	runs    *int
	run     func(ctx context.Context, rc *RunContext) error
}

func (s *testStage) Type() string     { return s.typ }
func (s *testStage) Version() int     { return s.version }
func (s *testStage) Options() Options { return s.opts }
func (s *testStage) Inputs() []string { return s.inputs }
func (s *testStage) Tools() []string  { return s.tools }
func (s *testStage) Run(ctx context.Context, rc *RunContext) error {
	if s.runs != nil {
		*s.runs++
	}
	if s.run != nil {
		return s.run(ctx, rc)
	}
	var b bytes.Buffer
	b.WriteString(s.opts.Text)
	for _, in := range s.inputs {
		data, err := os.ReadFile(filepath.Join(rc.Inputs[in], "result"))
		if err != nil {
			return err
		}
		b.WriteString("+" + string(data))
	}
	fmt.Fprintf(rc.Log, "writing %q\n", b.String())
	return os.WriteFile(filepath.Join(rc.OutDir, "result"), b.Bytes(), 0o644)
}

type fakeTools map[string]string

func (f fakeTools) ToolVersion(name string) string {
	if v, ok := f[name]; ok {
		return v
	}
	return NotFound
}

// chain is a → b → c, with b running tool "mktool".
func chain(aText, bText string, bVersion int) []Stage {
	return []Stage{
		&testStage{typ: "test.a", version: 1, opts: testOptions{aText}},
		&testStage{typ: "test.b", version: bVersion, opts: testOptions{bText}, inputs: []string{"test.a"}, tools: []string{"mktool"}},
		&testStage{typ: "test.c", version: 1, opts: testOptions{"c"}, inputs: []string{"test.b"}},
	}
}

func mustPlan(t *testing.T, stages []Stage, tools ToolVersioner, store *Store) *Plan {
	t.Helper()
	p, err := NewPlan(stages, tools, store)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCacheHitsAndInvalidation(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tools := fakeTools{"mktool": "mktool 1.0"}
	first, err := Run(ctx, store, mustPlan(t, chain("a", "b", 1), tools, store), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(first.Ran, ","); got != "test.a,test.b,test.c" {
		t.Fatalf("first run ran %s", got)
	}
	data, _ := os.ReadFile(filepath.Join(first.OutDirs["test.c"], "result"))
	if string(data) != "c+b+a" {
		t.Fatalf("result = %q", data)
	}

	cases := []struct {
		name   string
		stages []Stage
		tools  fakeTools
		ran    string
	}{
		{"identical inputs", chain("a", "b", 1), tools, ""},
		{"changed option of the middle stage", chain("a", "b2", 1), tools, "test.b,test.c"},
		{"changed input (first stage)", chain("a2", "b", 1), tools, "test.a,test.b,test.c"},
		{"changed stage version", chain("a", "b", 2), tools, "test.b,test.c"},
		{"changed tool version", chain("a", "b", 1), fakeTools{"mktool": "mktool 1.1"}, "test.b,test.c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Every case starts from the first run's objects only.
			plan := mustPlan(t, tc.stages, tc.tools, store)
			res, err := Run(ctx, store, plan, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(res.Ran, ","); got != tc.ran {
				t.Fatalf("ran %q, want %q", got, tc.ran)
			}
		})
	}
	// The meta.json records what made the key.
	m, err := store.ReadMeta(mustPlan(t, chain("a", "b", 1), tools, store).Step("test.b").Key)
	if err != nil {
		t.Fatal(err)
	}
	if m.ToolVersions["mktool"] != "mktool 1.0" || m.Inputs["test.a"] == "" {
		t.Fatalf("meta = %+v", m)
	}
}

func TestCanceledStageLeavesNoObject(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	slow := &testStage{typ: "test.slow", version: 1, opts: testOptions{"slow"}, run: func(ctx context.Context, rc *RunContext) error {
		// Write part of an output, then wait to be killed.
		if err := os.WriteFile(filepath.Join(rc.OutDir, "partial"), []byte("half"), 0o644); err != nil {
			return err
		}
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}}
	plan := mustPlan(t, []Stage{slow}, fakeTools{}, store)
	go func() {
		<-started
		cancel()
	}()
	_, err = Run(ctx, store, plan, RunOptions{})
	if !IsCanceled(err) {
		t.Fatalf("err = %v, want canceled", err)
	}
	if store.Has(plan.Steps[0].Key) {
		t.Fatal("canceled stage left an object")
	}
	for _, sub := range []string{"objects", "tmp"} {
		entries, _ := os.ReadDir(filepath.Join(store.Dir(), sub))
		if len(entries) != 0 {
			t.Fatalf("%s holds %d entries after cancel", sub, len(entries))
		}
	}
	// The next run builds it again rather than taking a half object.
	plan = mustPlan(t, []Stage{slow}, fakeTools{}, store)
	if plan.Steps[0].Cached {
		t.Fatal("canceled stage counts as cached")
	}
}

func TestFailingStageError(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	failing := &testStage{typ: "test.fail", version: 1, opts: testOptions{"x"}, run: func(ctx context.Context, rc *RunContext) error {
		for i := 0; i < 30; i++ {
			fmt.Fprintf(rc.Log, "log line %d\n", i)
		}
		return errors.New("running mktool: exit status 3")
	}}
	_, err = Run(context.Background(), store, mustPlan(t, []Stage{failing}, fakeTools{}, store), RunOptions{})
	var se *StageError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want StageError", err)
	}
	msg := err.Error()
	for _, want := range []string{"test.fail", "exit status 3", "log line 29", "log line 12", se.LogPath} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "log line 5\n") {
		t.Errorf("error shows more than the tail:\n%s", msg)
	}
	if b, err := os.ReadFile(se.LogPath); err != nil || !strings.Contains(string(b), "log line 0") {
		t.Fatalf("full log at %s missing: %v", se.LogPath, err)
	}
}

func TestPlanErrors(t *testing.T) {
	_, err := NewPlan([]Stage{&testStage{typ: "test.b", opts: testOptions{"b"}, inputs: []string{"test.a"}}}, fakeTools{}, nil)
	if err == nil || !strings.Contains(err.Error(), "input test.a") {
		t.Fatalf("missing input: %v", err)
	}
	_, err = NewPlan([]Stage{&testStage{typ: "test.a", opts: testOptions{"invalid"}}}, fakeTools{}, nil)
	if err == nil || !strings.Contains(err.Error(), "must not say invalid") {
		t.Fatalf("invalid options: %v", err)
	}
	store, _ := OpenStore(t.TempDir())
	_, err = Run(context.Background(), store, mustPlan(t, chain("a", "b", 1), fakeTools{}, store), RunOptions{StopAfter: "nope"})
	if err == nil || !strings.Contains(err.Error(), "test.a, test.b, test.c") {
		t.Fatalf("unknown stop-after: %v", err)
	}
}

func TestStopAfter(t *testing.T) {
	store, _ := OpenStore(t.TempDir())
	res, err := Run(context.Background(), store, mustPlan(t, chain("a", "b", 1), fakeTools{}, store), RunOptions{StopAfter: "test.b"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Ran, ",") != "test.a,test.b" {
		t.Fatalf("ran %v", res.Ran)
	}
}

func TestPublishNeverPartial(t *testing.T) {
	src := t.TempDir()
	good := filepath.Join(src, "good")
	os.WriteFile(good, []byte("data"), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "before"), []byte("kept"), 0o644)
	_, err := PublishOutputs(out, []Output{{Name: "a.iso", Path: good}, {Name: "b.json", Path: filepath.Join(src, "missing")}})
	if err == nil {
		t.Fatal("publishing a missing file succeeded")
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 1 || entries[0].Name() != "before" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("output dir holds %v after a failed publish", names)
	}
	paths, err := PublishOutputs(out, []Output{{Name: "a.iso", Path: good}})
	if err != nil || len(paths) != 1 {
		t.Fatal(err)
	}
	// A published output is a copy: editing it leaves the store alone.
	os.WriteFile(paths[0], []byte("edited"), 0o644)
	if b, _ := os.ReadFile(good); string(b) != "data" {
		t.Fatal("publish shares data with the store")
	}
}

func TestReporters(t *testing.T) {
	var buf bytes.Buffer
	r, err := NewReporter("json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	r.StageStart("live.rootfs", false)
	r.StageProgress("live.rootfs", "writing", 5, 10)
	r.StageDone("live.rootfs", time.Second, errors.New("boom"))
	r.Close()
	recs := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(recs) != 3 || !strings.HasPrefix(recs[0], "\x1e{") || !strings.Contains(recs[2], `"event":"failed"`) {
		t.Fatalf("json-seq output:\n%q", buf.String())
	}
	if _, err := NewReporter("fancy", &buf); err == nil || !strings.Contains(err.Error(), "auto, tty, plain, json") {
		t.Fatalf("unknown mode: %v", err)
	}
	buf.Reset()
	r, _ = NewReporter("auto", &buf)
	r.StageStart("iso.master", true)
	r.Close()
	if buf.String() != "iso.master: cached\n" {
		t.Fatalf("auto on a non-terminal = %q", buf.String())
	}
}

func TestPublishSkipsUntouchedCopies(t *testing.T) {
	src := filepath.Join(t.TempDir(), "obj")
	os.WriteFile(src, []byte("artifact bytes"), 0o644)
	out := t.TempDir()
	paths, err := PublishOutputs(out, []Output{{Name: "a.iso", Path: src}})
	if err != nil {
		t.Fatal(err)
	}
	var first, second os.FileInfo
	first, _ = os.Stat(paths[0])
	if _, err := getXattr(paths[0], publishedXattr); err != nil {
		t.Skipf("no user xattrs on %s: every publish copies", out)
	}
	if _, err := PublishOutputs(out, []Output{{Name: "a.iso", Path: src}}); err != nil {
		t.Fatal(err)
	}
	second, _ = os.Stat(paths[0])
	if !os.SameFile(first, second) {
		t.Fatal("an untouched published copy was copied again")
	}
	// Edited in place (same size): must be replaced by a fresh copy.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(paths[0], []byte("ARTIFACT BYTES"), 0o644)
	if _, err := PublishOutputs(out, []Output{{Name: "a.iso", Path: src}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(paths[0]); string(b) != "artifact bytes" {
		t.Fatalf("an edited output was kept: %q", b)
	}
}

func TestCheckToolsBeforeRunning(t *testing.T) {
	store, _ := OpenStore(t.TempDir())
	plan := mustPlan(t, chain("a", "b", 1), fakeTools{}, store)
	err := plan.CheckTools("")
	if err == nil || !strings.Contains(err.Error(), "mktool") {
		t.Fatalf("missing mktool not reported: %v", err)
	}
	if err := plan.CheckTools("test.a"); err != nil {
		t.Fatalf("a tool of a stage after --stop-after was required: %v", err)
	}
	if err := plan.CheckTools("", "mktool"); err != nil {
		t.Fatalf("an optional tool was required: %v", err)
	}
	if err := mustPlan(t, chain("a", "b", 1), fakeTools{"mktool": "1"}, store).CheckTools(""); err != nil {
		t.Fatal(err)
	}
}
