package main

// End-to-end tests: the whole build from a release payload served by a
// registry on 127.0.0.1, the artifacts checked with independent readers,
// and the ISO booted under QEMU (SeaBIOS and OVMF, as CD and as disk) with
// the fixture OS's init reporting what the CoreOS live initramfs would see.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"github.com/okd-project/scos-builder/internal/fixtures"
	"github.com/okd-project/scos-builder/internal/fixtures/fixturetest"
	"github.com/okd-project/scos-builder/internal/fixtures/qemuboot"
	"github.com/okd-project/scos-builder/internal/liveiso"
	"github.com/okd-project/scos-builder/internal/stream"
	"github.com/okd-project/scos-builder/internal/testutil"
)

// e2eEpoch is the SOURCE_DATE_EPOCH of every e2e build.
const e2eEpoch = "1700000000"

// e2eEnv is the fixture set pushed to a registry on 127.0.0.1, shared by
// the e2e tests of this package.
type e2eEnv struct {
	set    *fixtures.Set
	pushed *fixtures.Pushed
}

var (
	e2eOnce sync.Once
	e2e     *e2eEnv
	e2eErr  error
)

func setupE2E(t *testing.T) *e2eEnv {
	t.Helper()
	testutil.RequireTool(t, "xorriso", "mformat", "mcopy", "skopeo", "qemu-system-x86_64")
	set := fixturetest.Set(t)
	e2eOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e2eErr = err
			return
		}
		// Lives for the whole test binary: every e2e test pulls from it.
		go http.Serve(ln, ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
		payloadDir, err := os.MkdirTemp("", "scos-e2e-payload-")
		if err != nil {
			e2eErr = err
			return
		}
		pushed, err := fixtures.Push(context.Background(), set, ln.Addr().String(), payloadDir, io.Discard)
		if err != nil {
			e2eErr = err
			return
		}
		e2e = &e2eEnv{set: set, pushed: pushed}
	})
	if e2eErr != nil {
		t.Fatalf("serving the fixtures: %v", e2eErr)
	}
	return e2e
}

// buildOutput is the --json result of build.
type buildOutput struct {
	Outputs []string `json:"outputs"`
	Stream  string   `json:"stream"`
	Ran     []string `json:"ran"`
	Cached  []string `json:"cached"`
}

// runBuild runs `scos-builder build` in-process with a fixed
// SOURCE_DATE_EPOCH and returns its JSON result.
func runE2EBuild(t *testing.T, cacheDir string, args ...string) (*buildOutput, error) {
	t.Helper()
	t.Setenv("SOURCE_DATE_EPOCH", e2eEpoch)
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	argv := append([]string{"scos-builder", "--cache-dir", cacheDir, "--progress", "plain", "build", "--json", "--tls-verify=false"}, args...)
	if err := app.Run(context.Background(), argv); err != nil {
		t.Logf("build log:\n%s", errOut.String())
		return nil, err
	}
	var res buildOutput
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("decoding build output %q: %v", out.String(), err)
	}
	return &res, nil
}

func mustE2EBuild(t *testing.T, cacheDir string, args ...string) *buildOutput {
	t.Helper()
	res, err := runE2EBuild(t, cacheDir, args...)
	if err != nil {
		t.Fatalf("build %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// artifacts maps the kind of each output to its path.
func artifacts(t *testing.T, res *buildOutput) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range res.Outputs {
		switch {
		case strings.HasSuffix(p, ".iso"):
			m["iso"] = p
		case strings.Contains(p, "-live-kernel."):
			m["kernel"] = p
		case strings.Contains(p, "-live-initramfs."):
			m["initramfs"] = p
		case strings.Contains(p, "-live-rootfs."):
			m["rootfs"] = p
		case strings.HasSuffix(p, ".json"):
			m["stream"] = p
		}
	}
	if len(m) != 5 || len(res.Outputs) != 5 {
		t.Fatalf("outputs = %v", res.Outputs)
	}
	return m
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// boot boots cfg and checks the live system's report.
func boot(t *testing.T, cfg qemuboot.Config) *qemuboot.Result {
	t.Helper()
	cfg.SendEnter = true
	cfg.Timeout = 5 * time.Minute
	res, err := qemuboot.Boot(context.Background(), cfg)
	if err != nil || !res.OK {
		tr := ""
		if res != nil {
			tr = res.Transcript
		}
		t.Fatalf("boot failed: %v\n%s", err, tr)
	}
	t.Logf("LIVE-BOOT-OK after %s", res.Duration.Round(time.Second))
	return res
}

func TestE2EPayloadBuildBootsEverywhere(t *testing.T) {
	env := setupE2E(t)
	out := filepath.Join(t.TempDir(), "out")
	res := mustE2EBuild(t, t.TempDir(), "--payload", env.pushed.PayloadTagRef, "-o", out)
	a := artifacts(t, res)

	// The stream describes exactly these bytes.
	st, err := stream.ReadFile(a["stream"])
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	iso, release, err := st.LiveISO("x86_64")
	if err != nil {
		t.Fatal(err)
	}
	if iso.Sha256 != fileSHA256(t, a["iso"]) || release != env.set.Version {
		t.Fatalf("stream ISO entry %+v release %s", iso, release)
	}
	// coreos-installer's view of the ISO.
	li, err := liveiso.Open(a["iso"])
	if err != nil {
		t.Fatal(err)
	}
	volid := li.VolumeID
	if err := li.Verify(); err != nil {
		t.Fatal(err)
	}
	li.Close()
	if volid != "scos-"+env.set.Version {
		t.Fatalf("volume ID %q", volid)
	}

	boots := []struct {
		name string
		cfg  qemuboot.Config
	}{
		{"seabios-cd", qemuboot.Config{CDROM: a["iso"], Firmware: qemuboot.BIOS}},
		{"seabios-disk", qemuboot.Config{Disk: a["iso"], Firmware: qemuboot.BIOS}},
		{"ovmf-cd", qemuboot.Config{CDROM: a["iso"], Firmware: qemuboot.UEFI}},
		{"ovmf-disk", qemuboot.Config{Disk: a["iso"], Firmware: qemuboot.UEFI}},
	}
	for _, b := range boots {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := boot(t, b.cfg)
			cmdline, _ := r.Line("LIVE-CMDLINE: ")
			if !strings.Contains(cmdline, "coreos.liveiso="+volid) {
				t.Errorf("command line %q lacks coreos.liveiso=%s", cmdline, volid)
			}
			if mode, _ := r.Line("LIVE-MODE: "); mode != "iso "+volid {
				t.Errorf("mode %q", mode)
			}
			if dep, ok := r.Line("LIVE-DEPLOYMENT: "); !ok || !strings.HasPrefix(dep, "/ostree/boot.1/scos/") {
				t.Errorf("deployment %q", dep)
			}
			if v, _ := r.Line("LIVE-OSTREE-VERSION: "); v != env.set.Version {
				t.Errorf("OSTREE_VERSION %q", v)
			}
		})
	}
	t.Run("pxe", func(t *testing.T) {
		t.Parallel()
		initrd := filepath.Join(t.TempDir(), "pxe-initrd")
		if err := fixtures.ConcatInitrds(initrd, a["initramfs"], a["rootfs"]); err != nil {
			t.Fatal(err)
		}
		r := boot(t, qemuboot.Config{Kernel: a["kernel"], Initrd: initrd, Append: "rw ignition.firstboot ignition.platform.id=metal"})
		if mode, _ := r.Line("LIVE-MODE: "); !strings.HasPrefix(mode, "pxe") {
			t.Errorf("mode %q", mode)
		}
	})
	t.Run("ignition-embedded", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "config.ign")
		config := `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/e2e","contents":{"source":"data:,hello"}}]}}`
		os.WriteFile(cfgPath, []byte(config), 0o644)
		custom := filepath.Join(dir, "custom.iso")
		if _, errOut, err := run(t, "", "ignition", "embed", "-i", cfgPath, "-o", custom, a["iso"]); err != nil {
			t.Fatalf("embed: %v\n%s", err, errOut)
		}
		r := boot(t, qemuboot.Config{CDROM: custom, Firmware: qemuboot.BIOS})
		sum := sha256.Sum256([]byte(config))
		if got, _ := r.Line("LIVE-IGNITION-SHA256: "); got != hex.EncodeToString(sum[:]) {
			t.Errorf("init saw Ignition sha256 %q, want %x", got, sum)
		}
	})
}

func TestE2EReproducibleAndCached(t *testing.T) {
	env := setupE2E(t)
	cacheA, cacheB := t.TempDir(), t.TempDir()
	outA, outB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	first := mustE2EBuild(t, cacheA, "--payload", env.pushed.PayloadTagRef, "-o", outA)
	second := mustE2EBuild(t, cacheB, "--payload", env.pushed.PayloadTagRef, "-o", outB)
	a, b := artifacts(t, first), artifacts(t, second)
	for kind := range a {
		if fileSHA256(t, a[kind]) != fileSHA256(t, b[kind]) {
			t.Errorf("%s differs between two clean builds: %s vs %s", kind, a[kind], b[kind])
		}
	}

	start := time.Now()
	warm := mustE2EBuild(t, cacheA, "--payload", env.pushed.PayloadTagRef, "-o", outA)
	t.Logf("warm rebuild took %s", time.Since(start).Round(time.Millisecond))
	if len(warm.Ran) != 0 {
		t.Fatalf("warm rebuild ran %v", warm.Ran)
	}
	karg := mustE2EBuild(t, cacheA, "--payload", env.pushed.PayloadTagRef, "--karg", "e2e.test=1", "-o", filepath.Join(t.TempDir(), "k"))
	want := []string{"live.bootconfig", "iso.master", "stream.emit"}
	if !slices.Equal(karg.Ran, want) {
		t.Fatalf("a --karg change ran %v, want %v", karg.Ran, want)
	}
	li, err := liveiso.Open(artifacts(t, karg)["iso"])
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	if li.Kargs == nil || !strings.Contains(li.Kargs.Default, "e2e.test=1") {
		t.Fatalf("kargs %+v lack e2e.test=1", li.Kargs)
	}
}

func TestE2EDerivedImageBoots(t *testing.T) {
	setupE2E(t)
	set := fixturetest.Set(t)
	res := mustE2EBuild(t, t.TempDir(), "--image", "oci:"+set.DerivedLayout+":"+set.Tag, "-o", filepath.Join(t.TempDir(), "out"))
	a := artifacts(t, res)
	r := boot(t, qemuboot.Config{CDROM: a["iso"], Firmware: qemuboot.BIOS})
	if v, _ := r.Line("LIVE-OSTREE-VERSION: "); v != set.Version {
		t.Errorf("OSTREE_VERSION %q", v)
	}
}

func TestE2EBadInputLeavesOutputAlone(t *testing.T) {
	env := setupE2E(t)
	out := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "keep"), []byte("mine"), 0o644)
	badIgn := filepath.Join(t.TempDir(), "bad.ign")
	os.WriteFile(badIgn, []byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"relative"}]}}`), 0o644)
	corrupt, corruptDigest := corruptLayout(t, env.set)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"payload without image-references", []string{"--payload", env.pushed.Refs["cli"]}, "image-references"},
		{"registry unreachable", []string{"--payload", "127.0.0.1:1/okd/release:none", "--retry", "0"}, "127.0.0.1:1"},
		{"blob not matching its digest", []string{"--image", "oci:" + corrupt + ":" + env.set.Tag}, corruptDigest},
		{"unknown os tag", []string{"--payload", env.pushed.PayloadTagRef, "--os-tag", "no-such-tag"}, "stream-coreos"},
		{"not an ostree image", []string{"--image", env.pushed.Refs["cli"]}, "not an ostree container image"},
		{"invalid ignition", []string{"--payload", env.pushed.PayloadTagRef, "--ignition", badIgn}, "storage.files.0.path"},
		{"unknown recipe", []string{"--payload", env.pushed.PayloadTagRef, "--recipe", "ubuntu"}, "fcos, okd, rhcos, scos"},
		{"unknown stage", []string{"--payload", env.pushed.PayloadTagRef, "--stop-after", "nope"}, "live.rootfs"},
		{"base URL that is not absolute", []string{"--payload", env.pushed.PayloadTagRef, "--base-url", "not-a-url"}, "--base-url"},
		// Fails late, in live.bootconfig, after the rootfs and initrd exist.
		{"no syslinux files", []string{"--payload", env.pushed.PayloadTagRef, "--syslinux-dir", t.TempDir()}, "--syslinux-dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runE2EBuild(t, t.TempDir(), append(tc.args, "-o", out)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			entries, _ := os.ReadDir(out)
			if len(entries) != 1 || entries[0].Name() != "keep" {
				t.Fatalf("output directory changed: %v", entries)
			}
		})
	}
}

// corruptLayout copies the fixture OS layout and flips a byte in its
// largest layer blob; it returns the layout and the blob's digest.
func corruptLayout(t *testing.T, set *fixtures.Set) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "os")
	testutil.Run(t, "cp", "-a", set.OSLayout, dir)
	blobs := filepath.Join(dir, "blobs", "sha256")
	entries, err := os.ReadDir(blobs)
	if err != nil {
		t.Fatal(err)
	}
	var biggest os.DirEntry
	var size int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Size() > size {
			biggest, size = e, fi.Size()
		}
	}
	p := filepath.Join(blobs, biggest.Name())
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, biggest.Name()
}
