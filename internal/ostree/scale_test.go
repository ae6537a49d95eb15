package ostree

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/testutil"
)

// TestScale measures import + deploy of a large synthetic image (time and
// peak RSS of a child process doing only that) against tar -x of the same
// layer. Run with SCALE_TEST=1 (SCALE_FILES, SCALE_MB adjust the size).
func TestScale(t *testing.T) {
	if os.Getenv("SCALE_TEST") == "" {
		t.Skip("set SCALE_TEST=1 to measure a large image")
	}
	requireOstree(t)
	nfiles, _ := strconv.Atoi(os.Getenv("SCALE_FILES"))
	if nfiles == 0 {
		nfiles = 50000
	}
	mb, _ := strconv.Atoi(os.Getenv("SCALE_MB"))
	if mb == 0 {
		mb = 1500
	}
	work := t.TempDir()
	rootfs := filepath.Join(work, "rootfs")
	makeRootfs(t, rootfs, rootfsOpts{})
	chacha := rand.NewChaCha8([32]byte{1})
	rng := rand.New(chacha)
	avg := int64(mb) << 20 / int64(nfiles)
	buf := make([]byte, 4*avg)
	start := time.Now()
	for i := 0; i < nfiles; i++ {
		dir := filepath.Join(rootfs, "usr/share/scale", fmt.Sprintf("d%03d", i%500))
		os.MkdirAll(dir, 0o755)
		n := rng.Int64N(2 * avg)
		chacha.Read(buf[:n])
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), buf[:n], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("rootfs: %d files, %d MiB in %s", nfiles, mb, time.Since(start).Round(time.Second))
	start = time.Now()
	repo, commit := commitRootfs(t, rootfs, true)
	t.Logf("ostree commit in %s", time.Since(start).Round(time.Second))
	os.RemoveAll(rootfs)

	start = time.Now()
	layerPath := filepath.Join(work, "layer.tar")
	f, err := os.Create(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	exportTo(t, bw, repo, commit)
	bw.Flush()
	f.Close()
	os.RemoveAll(repo)
	diffID := fileDigest(t, layerPath)
	st, _ := os.Stat(layerPath)
	t.Logf("export: %d MiB layer in %s", st.Size()>>20, time.Since(start).Round(time.Second))

	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "created": createdRFC,
		"config": map[string]any{"Labels": map[string]string{LabelCommit: commit, LabelFinalDiffID: diffID, LabelBootable: "true"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}}})
	cfgPath := filepath.Join(work, "config.json")
	os.WriteFile(cfgPath, cfg, 0o644)

	if keep := os.Getenv("SCALE_KEEP"); keep != "" {
		os.MkdirAll(keep, 0o755)
		testutil.Run(t, "cp", layerPath, cfgPath, keep)
	}
	// Both measured runs start with no dirty pages, the layer in the page cache.
	testutil.Run(t, "sync")
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SCALE_CHILD_LAYER="+layerPath, "SCALE_CHILD_CONFIG="+cfgPath,
		"SCALE_CHILD_STORE="+filepath.Join(work, "store"))
	start = time.Now()
	out, err := cmd.CombinedOutput()
	childTime := time.Since(start)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	rss := ru.Maxrss
	childCPU := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	os.RemoveAll(filepath.Join(work, "store"))
	testutil.Run(t, "sync")
	untar := filepath.Join(work, "untar")
	os.MkdirAll(untar, 0o755)
	start = time.Now()
	tarCmd := exec.Command("tar", "-xf", layerPath, "-C", untar)
	if out, err := tarCmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	tarTime := time.Since(start)
	tru := tarCmd.ProcessState.SysUsage().(*syscall.Rusage)
	tarCPU := time.Duration(tru.Utime.Nano() + tru.Stime.Nano())
	os.RemoveAll(untar)
	t.Logf("child output:\n%s", out)
	t.Logf("import+deploy: %s wall, %s CPU, peak RSS %d MiB; tar -x of the same layer: %s wall, %s CPU (wall ratio %.2f); load %s",
		childTime.Round(time.Millisecond), childCPU.Round(time.Millisecond), rss>>10, tarTime.Round(time.Millisecond),
		tarCPU.Round(time.Millisecond), float64(childTime)/float64(tarTime), loadavg())
	if rss>>10 > 512 {
		t.Errorf("peak RSS %d MiB exceeds 512 MiB", rss>>10)
	}
}

// TestScaleChild is the measured process of TestScale.
func TestScaleChild(t *testing.T) {
	layer := os.Getenv("SCALE_CHILD_LAYER")
	if layer == "" {
		t.Skip("run by TestScale")
	}
	cfg, err := os.ReadFile(os.Getenv("SCALE_CHILD_CONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := fstree.OpenStore(os.Getenv("SCALE_CHILD_STORE"))
	if err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: testRef, Config: cfg, Manifest: []byte("{}"), Layers: []Layer{{Digest: "sha256:scale",
		Open: func() (io.ReadCloser, error) { return os.Open(layer) }}}}
	start := time.Now()
	res, err := Import(context.Background(), img, store, os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	imported := time.Since(start)
	_, info, err := Deploy(res, DeployOptions{OSName: testOS, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("import %s, deploy %s, %d content objects, %d MiB, bootcsum %s\n", imported.Round(time.Millisecond),
		(time.Since(start) - imported).Round(time.Millisecond), res.Stats.ContentObjects, res.Stats.ContentBytes>>20, info.Bootcsum)
}

func fileDigest(t *testing.T, p string) string {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// exportTo streams a single-layer v1 export of commit to w.
func exportTo(t *testing.T, w io.Writer, repo, commit string) {
	r := repoReader{t: t, repo: repo}
	c, _ := DecodeCommit(r.meta(commit, ObjCommit))
	tw := &tarWriter{t: t, tw: tar.NewWriter(w)}
	tw.hdr(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755})
	tw.repoStructure()
	tw.object(commit, ObjCommit, r.meta(commit, ObjCommit))
	tw.object(c.RootMeta, ObjDirMeta, r.meta(c.RootMeta, ObjDirMeta))
	objs := map[string]*contentObj{}
	var order []string
	written := map[string]bool{}
	var walk func(sum, p string)
	walk = func(sum, p string) {
		tb := r.meta(sum, ObjDirTree)
		if !written[sum] {
			tw.object(sum, ObjDirTree, tb)
			written[sum] = true
		}
		dt, _ := DecodeDirTree(tb)
		for _, f := range dt.Files {
			if objs[f.Checksum] == nil {
				objs[f.Checksum] = r.content(f.Checksum)
				order = append(order, f.Checksum)
			}
			objs[f.Checksum].paths = append(objs[f.Checksum].paths, p+f.Name)
		}
		for _, d := range dt.Dirs {
			if !written[d.MetaChecksum] {
				tw.object(d.MetaChecksum, ObjDirMeta, r.meta(d.MetaChecksum, ObjDirMeta))
				written[d.MetaChecksum] = true
			}
			walk(d.TreeChecksum, p+d.Name+"/")
		}
	}
	walk(c.RootTree, "")
	writeObjectsStreaming(tw, objs, order)
	tw.tw.Close()
}

func writeObjectsStreaming(w *tarWriter, objs map[string]*contentObj, sums []string) {
	seen := map[string]bool{}
	for _, sum := range sums {
		obj := objs[sum]
		xb, _ := EncodeXattrs(obj.xattrs)
		xp := repoPrefix + ObjectPath(sha256Hex(xb), "file-xattrs")
		if !seen[xp] {
			w.file(xp, xb, 0o644)
			seen[xp] = true
		}
		w.link(repoPrefix+ObjectPath(sum, "file-xattrs-link"), xp, 0o644, 0, 0)
		objPath := repoPrefix + ObjectPath(sum, ObjFile)
		mode := int64(obj.st.Mode & 0o7777)
		if obj.target != "" {
			w.hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: objPath, Linkname: obj.target, Mode: mode, Uid: int(obj.st.Uid), Gid: int(obj.st.Gid)})
		} else {
			w.hdr(&tar.Header{Typeflag: tar.TypeReg, Name: objPath, Size: obj.st.Size, Mode: mode, Uid: int(obj.st.Uid), Gid: int(obj.st.Gid)})
			f, err := os.Open(obj.path)
			if err != nil {
				w.t.Fatal(err)
			}
			io.Copy(w.tw, f)
			f.Close()
		}
		for _, p := range obj.paths {
			if obj.target == "" && obj.st.Size == 0 {
				w.hdr(&tar.Header{Typeflag: tar.TypeReg, Name: mapPathV1(p), Mode: mode})
				continue
			}
			w.link(mapPathV1(p), objPath, mode, int(obj.st.Uid), int(obj.st.Gid))
		}
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
