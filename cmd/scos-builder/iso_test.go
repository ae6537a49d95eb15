package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okd-project/scos-builder/internal/liveiso/liveisotest"
	"github.com/okd-project/scos-builder/internal/testutil"
)

// run runs `iso args...` with stdin and returns stdout and stderr.
func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := isoCommand()
	var out, errOut bytes.Buffer
	cmd.Writer, cmd.ErrWriter, cmd.Reader = &out, &errOut, strings.NewReader(stdin)
	err := cmd.Run(context.Background(), append([]string{"iso"}, args...))
	return out.String(), errOut.String(), err
}

func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := run(t, stdin, args...)
	if err != nil {
		t.Fatalf("iso %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func mustFail(t *testing.T, want string, stdin string, args ...string) {
	t.Helper()
	_, _, err := run(t, stdin, args...)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("iso %s: got error %v, want one containing %q", strings.Join(args, " "), err, want)
	}
}

func digest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return digestBytes(b)
}

func digestBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

const config = `{"ignition": {"version": "3.0.0"}}` + "\n"

// The flow of coreos-installer's tests/images/iso-ignition.sh.
func TestIgnitionCommands(t *testing.T) {
	for _, fx := range liveisotest.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			iso := fx.Path
			orig := digest(t, iso)
			out := filepath.Join(t.TempDir(), "out.iso")
			cfgFile := filepath.Join(t.TempDir(), "config.ign")
			os.WriteFile(cfgFile, []byte(config), 0o644)

			mustFail(t, "no embedded Ignition config", "", "ignition", "show", iso)
			streamed := digestBytes([]byte(mustRun(t, config, "ignition", "embed", "-o", "-", iso)))
			mustRun(t, config, "ignition", "embed", "-i", cfgFile, iso, "-o", out)
			if got := mustRun(t, "", "ignition", "show", out); got != config {
				t.Fatalf("show: %q", got)
			}
			if digest(t, out) != streamed {
				t.Error("streamed and copied ISOs differ")
			}
			mustFail(t, "exists", "", "ignition", "embed", "-i", cfgFile, iso, "-o", out)
			mustRun(t, config, "ignition", "embed", iso)
			if digest(t, iso) != streamed {
				t.Error("in-place and streamed ISOs differ")
			}
			if got := mustRun(t, "", "ignition", "show", iso); got != config {
				t.Fatalf("show after in-place embed: %q", got)
			}
			mustFail(t, "already has an embedded Ignition config; use -f to force", config, "ignition", "embed", iso)
			mustRun(t, `{"ignition":{"version":"3.5.0"}}`, "ignition", "embed", "-f", iso)
			if got := mustRun(t, "", "ignition", "show", iso); got != `{"ignition":{"version":"3.5.0"}}` {
				t.Fatalf("show after forced embed: %q", got)
			}

			if digestBytes([]byte(mustRun(t, "", "ignition", "remove", iso, "-o", "-"))) != orig {
				t.Error("streamed remove did not restore the original")
			}
			os.Remove(out)
			mustRun(t, "", "ignition", "remove", iso, "-o", out)
			if digest(t, out) != orig {
				t.Error("remove -o did not restore the original")
			}
			mustRun(t, "", "ignition", "remove", iso)
			if digest(t, iso) != orig {
				t.Error("remove did not restore the original")
			}
		})
	}
}

// The flow of coreos-installer's tests/images/iso-kargs.sh.
func TestKargsCommands(t *testing.T) {
	for _, fx := range liveisotest.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			iso := fx.Path
			if !fx.HasKargs() {
				mustFail(t, "no karg embed areas found", "", "kargs", "show", iso)
				mustFail(t, "no karg embed areas found", "", "kargs", "modify", "-a", "x", iso)
				mustFail(t, "no karg embed areas found", "", "kargs", "reset", iso)
				return
			}
			orig := digest(t, iso)
			out := filepath.Join(t.TempDir(), "out.iso")
			def := strings.TrimSuffix(mustRun(t, "", "kargs", "show", "--default", iso), "\n")
			if cur := strings.TrimSuffix(mustRun(t, "", "kargs", "show", iso), "\n"); cur != def {
				t.Fatalf("current %q, default %q", cur, def)
			}

			stream := mustRun(t, "", "kargs", "modify", "-a", "foobar=oldval", "-a", "dodo", "-o", "-", iso)
			os.WriteFile(out, []byte(stream), 0o644)
			if got := mustRun(t, "", "kargs", "show", out); got != def+" foobar=oldval dodo\n" {
				t.Fatalf("after modify: %q", got)
			}
			mustRun(t, "", "kargs", "modify", "-a", "foobar=oldval", "-a", "dodo", iso)
			if digest(t, iso) != digestBytes([]byte(stream)) {
				t.Error("in-place and streamed modify differ")
			}
			os.Remove(out)
			mustRun(t, "", "kargs", "modify", "-r", "foobar=oldval=newval", iso, "-o", out)
			if got := mustRun(t, "", "kargs", "show", out); got != def+" foobar=newval dodo\n" {
				t.Fatalf("after replace: %q", got)
			}
			mustRun(t, "", "kargs", "modify", "-d", "foobar=oldval", "-d", "dodo", iso)
			if digest(t, iso) != orig {
				t.Error("delete did not restore the original")
			}
			mustFail(t, "KEY=OLD=NEW", "", "kargs", "modify", "-r", "foobar", iso)

			// longest karg: the whole string is size-1 bytes
			var info struct {
				Kargs struct{ Size int } `json:"kargs"`
			}
			if err := json.Unmarshal([]byte(mustRun(t, "", "inspect", "--json", iso)), &info); err != nil {
				t.Fatal(err)
			}
			usable := info.Kargs.Size - len(def) - 2
			long := strings.Repeat("k", usable)
			mustRun(t, "", "kargs", "modify", "-a", long, iso)
			if got := mustRun(t, "", "kargs", "show", iso); len(got)-1 != info.Kargs.Size-1 || !strings.HasSuffix(got, " "+long+"\n") {
				t.Errorf("longest kargs: %d bytes", len(got)-1)
			}
			mustRun(t, "", "kargs", "reset", iso)
			mustFail(t, "kargs too large for area", "", "kargs", "modify", "-a", long+"k", iso)
			if digest(t, iso) != orig {
				t.Error("refused modify changed the ISO")
			}

			// modify -a x, then reset, in place, as a copy and streamed
			mustRun(t, "", "kargs", "modify", "-a", "x", iso)
			if digest(t, iso) == orig {
				t.Fatal("modify -a x changed nothing")
			}
			os.Remove(out)
			mustRun(t, "", "kargs", "reset", iso, "-o", out)
			if digest(t, out) != orig {
				t.Error("reset -o did not restore the original")
			}
			if digestBytes([]byte(mustRun(t, "", "kargs", "reset", iso, "-o", "-"))) != orig {
				t.Error("reset -o - did not restore the original")
			}
			mustRun(t, "", "kargs", "reset", iso)
			if digest(t, iso) != orig {
				t.Error("reset did not restore the original")
			}
		})
	}
}

func TestInspect(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.s390x")
	var r inspection
	if err := json.Unmarshal([]byte(mustRun(t, "", "inspect", "--json", fx.Path)), &r); err != nil {
		t.Fatal(err)
	}
	if r.Ignition.File != "images/cdboot.img" || r.Ignition.FileOffset != 132096 || r.Ignition.Length != 262144 ||
		r.Ignition.Customized || r.Kargs == nil || r.Kargs.Customized || r.Kargs.Size != 896 ||
		r.VolumeID != "fedora-coreos-38.20230718.dev.0" || r.Features == nil || len(r.ElTorito) != 1 || r.ElTorito[0].File != "IMAGES/CDBOOT.IMG" {
		t.Errorf("inspect --json: %+v", r)
	}
	mustRun(t, config, "ignition", "embed", fx.Path)
	mustRun(t, "", "kargs", "modify", "-a", "x", fx.Path)
	text := mustRun(t, "", "inspect", fx.Path)
	for _, want := range []string{"Volume ID:      fedora-coreos-38.20230718.dev.0", "images/cdboot.img, offset", "customized:   yes (config.ign)", "current:      " + r.Kargs.Default + " x", "1: bios"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, text)
		}
	}
}

func TestBadInput(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	iso := fx.Path
	orig := digest(t, iso)

	random := make([]byte, 300000)
	rand.Read(random)
	big := `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/big", "contents": {"source": "data:;base64,` +
		base64.StdEncoding.EncodeToString(random) + `"}}]}}`
	mustFail(t, "the area holds 262144", big, "ignition", "embed", iso)
	mustFail(t, "needs ", big, "ignition", "embed", iso)

	mustFail(t, "(line 3, column 1)", "{\n\"ignition\": {\"version\": \"3.4.0\"}\n", "ignition", "embed", iso)
	mustFail(t, "$.storage.files.0.path (line 2, column 32): path not absolute",
		"{\"ignition\": {\"version\": \"3.4.0\"},\n\"storage\": {\"files\": [{\"path\": \"etc/x\"}]}}", "ignition", "embed", iso)
	mustFail(t, "unsupported config version", `{"ignition": {"version": "2.2.0"}}`, "ignition", "embed", iso)
	_, stderr, err := run(t, `{"ignition": {"version": "3.4.0"}, "bogus": 1}`, "ignition", "embed", "-o", "-", iso)
	if err != nil || !strings.Contains(stderr, "unused key bogus") {
		t.Errorf("warning: %v, stderr %q", err, stderr)
	}
	mustFail(t, "kargs too large for area", "", "kargs", "modify", "-a", strings.Repeat("k", 1200), iso)
	if digest(t, iso) != orig {
		t.Fatal("refused commands changed the ISO")
	}
	// --no-validate embeds what coreos-installer's own test embeds
	// (a truncated JSON document) byte for byte.
	mustRun(t, `{"ignition": {"version": "3.0.0"}`, "ignition", "embed", "--no-validate", iso)
	if got := mustRun(t, "", "ignition", "show", iso); got != `{"ignition": {"version": "3.0.0"}` {
		t.Errorf("show after --no-validate: %q", got)
	}

	mustFail(t, "want exactly one ISO argument", "", "ignition", "show")
	mustFail(t, "want exactly one ISO argument", "", "kargs", "show", iso, iso)
	mustFail(t, "no such file", "", "inspect", filepath.Join(t.TempDir(), "missing.iso"))
}

func TestNotALiveISO(t *testing.T) {
	testutil.RequireTool(t, "genisoimage")
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tree", "isolinux"), 0o755)
	os.WriteFile(filepath.Join(dir, "tree", "isolinux", "isolinux.cfg"), []byte("default linux\n"), 0o644)
	iso := filepath.Join(dir, "plain.iso")
	if out, err := exec.Command("genisoimage", "-quiet", "-R", "-J", "-o", iso, filepath.Join(dir, "tree")).CombinedOutput(); err != nil {
		t.Fatalf("genisoimage: %v: %s", err, out)
	}
	mustFail(t, "not a CoreOS live ISO: neither COREOS/IGNINFO.JSO nor IMAGES/IGNITION.IMG exists", config, "ignition", "embed", iso)
	mustFail(t, "IMAGES/IGNITION.IMG", "", "kargs", "show", iso)
	mustFail(t, "IMAGES/IGNITION.IMG", "", "inspect", iso)
}

func TestReadOnlyISO(t *testing.T) {
	fx := liveisotest.One(t, "embed-areas-2023-07.x86_64")
	iso := fx.Path
	if os.Geteuid() == 0 {
		testutil.RequireTool(t, "chattr")
		if out, err := exec.Command("chattr", "+i", iso).CombinedOutput(); err != nil {
			testutil.SkipOrFail(t, "chattr +i: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", iso).Run() })
	} else if err := os.Chmod(iso, 0o444); err != nil {
		t.Fatal(err)
	}
	orig := digest(t, iso)
	mustFail(t, "write a modified copy with -o", config, "ignition", "embed", iso)
	mustFail(t, "for writing", "", "kargs", "modify", "-a", "x", iso)
	out := filepath.Join(t.TempDir(), "out.iso")
	mustRun(t, config, "ignition", "embed", iso, "-o", out)
	if got := mustRun(t, "", "ignition", "show", out); got != config {
		t.Errorf("show on the copy: %q", got)
	}
	if digest(t, iso) != orig {
		t.Error("read-only ISO changed")
	}
}
