package ostree

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/okd-project/scos-builder/internal/fstree"
	"github.com/okd-project/scos-builder/internal/testutil"
)

func baseCommit(t *testing.T, o rootfsOpts) (string, string) {
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	makeRootfs(t, rootfs, o)
	return commitRootfs(t, rootfs, !o.twoKernels)
}

// Every metadata object ostree wrote re-encodes to the same bytes, and
// every content object's checksum recomputes.
func TestObjectsMatchOstree(t *testing.T) {
	requireOstree(t)
	repo, commit := baseCommit(t, rootfsOpts{})
	err := filepath.Walk(filepath.Join(repo, "objects"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		base := filepath.Base(p)
		sum := filepath.Base(filepath.Dir(p)) + strings.Split(base, ".")[0]
		typ := strings.SplitN(base, ".", 2)[1]
		var re []byte
		switch typ {
		case ObjFile:
			o := repoReader{t: t, repo: repo}.content(sum)
			var got string
			if o.target != "" {
				got, err = SymlinkChecksum(o.st.Uid, o.st.Gid, o.st.Mode, o.target, o.xattrs)
			} else {
				h, herr := NewContentHash(o.st.Uid, o.st.Gid, o.st.Mode, "", o.xattrs)
				if herr != nil {
					return herr
				}
				b, _ := os.ReadFile(p)
				h.Write(b)
				got = hex.EncodeToString(h.Sum(nil))
			}
			if got != sum {
				t.Errorf("content object %s: computed %s", sum, got)
			}
			return nil
		case ObjCommit:
			b, _ := os.ReadFile(p)
			c, err := DecodeCommit(b)
			if err != nil {
				return err
			}
			if v, _ := c.Metadata.Lookup("ostree.bootable"); v.Value != true {
				t.Errorf("commit metadata ostree.bootable = %v", v)
			}
			re, err = c.Encode()
			if err != nil {
				return err
			}
		case ObjDirTree:
			b, _ := os.ReadFile(p)
			d, err := DecodeDirTree(b)
			if err != nil {
				return err
			}
			re, _ = d.Encode()
		case ObjDirMeta:
			b, _ := os.ReadFile(p)
			d, err := DecodeDirMeta(b)
			if err != nil {
				return err
			}
			re, _ = d.Encode()
		default:
			return nil
		}
		if got := sha256Hex(re); got != sum {
			t.Errorf("%s object %s re-encodes to %s", typ, sum, got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = commit
}

// The layers written by the test exporter are what the spec describes:
// plain tar -x of the commit layer gives a rootfs with etc/ and a
// bare-split-xattrs repo that libostree itself accepts.
func TestExportedLayerIsValid(t *testing.T) {
	requireOstree(t)
	repo, commit := baseCommit(t, rootfsOpts{})
	layers := exportImage(t, repo, commit, exportOpts{})
	x := filepath.Join(t.TempDir(), "x")
	os.MkdirAll(x, 0o755)
	blob := filepath.Join(t.TempDir(), "layer.tar.gz")
	os.WriteFile(blob, layers[0].data, 0o644)
	testutil.Run(t, "tar", "-xpzf", blob, "-C", x, "--xattrs", "--xattrs-include=*", "--numeric-owner")
	out := testutil.Run(t, "ostree", "fsck", "--repo="+filepath.Join(x, "sysroot/ostree/repo"))
	if !strings.Contains(out, "no errors found") {
		t.Fatalf("fsck of extracted layer: %s", out)
	}
	for _, p := range []string{"etc/passwd", "usr/bin/hello", "usr/lib/modules/" + testKver + "/vmlinuz"} {
		if _, err := os.Lstat(filepath.Join(x, p)); err != nil {
			t.Errorf("extracted layer lacks %s: %v", p, err)
		}
	}
}

func TestImportFormatsAgree(t *testing.T) {
	requireOstree(t)
	repo, commit := baseCommit(t, rootfsOpts{})
	var commits []string
	for _, o := range []exportOpts{{}, {chunked: true}, {v0: true}, {v0: true, chunked: true}} {
		layers := exportImage(t, repo, commit, o)
		res, _, log := importImage(t, buildImage(t, commit, layers, nil, nil))
		if res.BaseCommit != commit {
			t.Fatalf("%+v: base commit %s, want %s", o, res.BaseCommit, commit)
		}
		if res.Stats.OstreeLayers != len(layers) {
			t.Errorf("%+v: %d ostree layers imported, want %d", o, res.Stats.OstreeLayers, len(layers))
		}
		if !strings.Contains(log, "imported") {
			t.Errorf("log lacks the import summary: %s", log)
		}
		mc := commitOf(t, res, res.Commit)
		if bc := commitOf(t, res, commit); mc.RootTree != bc.RootTree || mc.RootMeta != bc.RootMeta {
			t.Errorf("%+v: merge commit root %s/%s differs from the base commit's %s/%s", o, mc.RootTree, mc.RootMeta, bc.RootTree, bc.RootMeta)
		}
		commits = append(commits, mc.RootTree)
	}
	for _, c := range commits[1:] {
		if c != commits[0] {
			t.Errorf("merge commit trees differ between formats: %v", commits)
		}
	}
}

// Import + Deploy of the base image, checked with the real ostree CLI and
// compared with a real ostree admin deploy of the same merge commit.
func TestDeployVerifiedByOstree(t *testing.T) {
	requireOstree(t)
	repo, commit := baseCommit(t, rootfsOpts{})
	layers := exportImage(t, repo, commit, exportOpts{chunked: true})
	res0, store, _ := importImage(t, buildImage(t, commit, layers, nil, nil))
	// The result passes between stages serialized.
	var enc bytes.Buffer
	if err := res0.Encode(&enc); err != nil {
		t.Fatal(err)
	}
	res, err := DecodeImportResult(&enc, store)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != res0.Commit || res.Stats.ContentObjects != res0.Stats.ContentObjects {
		t.Fatalf("decoded result differs: %+v", res)
	}
	tree0, info, err := Deploy(res, DeployOptions{OSName: testOS, Kargs: []string{"rw", "console=ttyS0"}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	enc.Reset()
	if err := fstree.Encode(&enc, tree0); err != nil {
		t.Fatal(err)
	}
	tree, err := fstree.Decode(&enc, store.Resolve)
	if err != nil {
		t.Fatal(err)
	}
	sysroot := materialize(t, tree)
	if keep := os.Getenv("KEEP_SYSROOT"); keep != "" {
		testutil.Run(t, "cp", "-a", sysroot, keep)
	}
	verifySysroot(t, sysroot, res, info)

	compareWithAdminDeploy(t, sysroot, res, info, nil)
}

// compareWithAdminDeploy deploys the same merge commit (pulled from our
// repo) with ostree admin deploy and compares normalized listings and the
// BLS entry. Documented differences: ostree's repo lock file, our aleph
// files (written by the image builder, not by ostree admin deploy), and
// whatever extraSkip names.
func compareWithAdminDeploy(t *testing.T, sysroot string, res *ImportResult, info *DeployInfo, extraSkip func(string) bool) {
	t.Helper()
	golden := filepath.Join(t.TempDir(), "golden")
	t.Cleanup(func() { exec.Command("chattr", "-R", "-f", "-i", golden).Run() })
	os.MkdirAll(golden, 0o755)
	testutil.Run(t, "ostree", "admin", "init-fs", "--modern", golden)
	testutil.Run(t, "ostree", "admin", "os-init", "--sysroot="+golden, testOS)
	ourRepo := filepath.Join(sysroot, "ostree/repo")
	testutil.Run(t, "ostree", "pull-local", "--repo="+golden+"/ostree/repo", ourRepo, res.Commit, res.BaseCommit)
	for r, c := range res.Refs {
		testutil.Run(t, "ostree", "refs", "--repo="+golden+"/ostree/repo", "--create="+r, c)
	}
	origin := filepath.Join(t.TempDir(), "origin")
	os.WriteFile(origin, []byte("[origin]\ncontainer-image-reference=ostree-unverified-registry:"+testRef+"\n"), 0o644)
	testutil.Run(t, "ostree", "admin", "deploy", "--sysroot="+golden, "--os="+testOS, "--no-prune",
		"--origin-file="+origin, "--karg=rw", "--karg=console=ttyS0", res.Commit)
	skip := func(rel string) bool {
		return rel == "ostree/repo/.lock" || rel == ".aleph-version.json" || rel == ".coreos-aleph-version.json" ||
			(extraSkip != nil && extraSkip(rel))
	}
	want := listing(t, golden, skip)
	got := listing(t, sysroot, skip)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("listing differs from ostree admin deploy:\n%s", diffLines(want, got))
	}
	wantBLS, _ := os.ReadFile(filepath.Join(golden, info.BLSEntry))
	gotBLS, _ := os.ReadFile(filepath.Join(sysroot, info.BLSEntry))
	if string(wantBLS) != string(gotBLS) {
		t.Errorf("BLS entry:\n%s\nostree admin deploy wrote:\n%s", gotBLS, wantBLS)
	}
}

func diffLines(want, got []string) string {
	w := map[string]bool{}
	for _, l := range want {
		w[l] = true
	}
	g := map[string]bool{}
	for _, l := range got {
		g[l] = true
	}
	var b strings.Builder
	for _, l := range want {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range got {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// verifySysroot runs the acceptance checks of the spec (§3) on a
// materialized sysroot.
func verifySysroot(t *testing.T, sysroot string, res *ImportResult, info *DeployInfo) {
	t.Helper()
	repo := filepath.Join(sysroot, "ostree/repo")
	if out := testutil.Run(t, "ostree", "fsck", "--repo="+repo); !strings.Contains(out, "no errors found") {
		t.Errorf("fsck: %s", out)
	}
	status := testutil.Run(t, "ostree", "admin", "status", "--sysroot="+sysroot)
	if !strings.Contains(status, testOS+" "+res.Commit+".0") || strings.Count(status, ".0\n") != 1 {
		t.Errorf("admin status does not show one deployment of %s:\n%s", res.Commit, status)
	}
	if got := strings.TrimSpace(testutil.Run(t, "ostree", "rev-parse", "--repo="+repo, "ostree/1/1/0")); got != res.Commit {
		t.Errorf("ostree/1/1/0 = %s, want %s", got, res.Commit)
	}
	link, err := os.Readlink(filepath.Join(sysroot, info.Bootlink))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(link) != res.Commit+".0" {
		t.Errorf("bootlink -> %s, want the deployment of %s", link, res.Commit)
	}
	if got, _ := os.Readlink(filepath.Join(sysroot, "boot/loader")); got != "loader.1" {
		t.Errorf("boot/loader -> %q", got)
	}
	if got, _ := os.Readlink(filepath.Join(sysroot, "ostree/boot.1")); got != "boot.1.1" {
		t.Errorf("ostree/boot.1 -> %q", got)
	}
	deploy, _ := filepath.EvalSymlinks(filepath.Join(sysroot, "ostree/boot.1", testOS, info.Bootcsum, "0"))
	if deploy != filepath.Join(sysroot, info.DeployPath) {
		t.Errorf("bootlink resolves to %s, want %s", deploy, filepath.Join(sysroot, info.DeployPath))
	}
	diff := testutil.Run(t, "ostree", "diff", "--repo="+repo, res.Commit, filepath.Join(sysroot, info.DeployPath))
	etcLine := regexp.MustCompile(`^A\s+/?etc(/|$)`)
	sawEtc := false
	for _, l := range strings.Split(strings.TrimSpace(diff), "\n") {
		if !etcLine.MatchString(l) {
			t.Errorf("ostree diff: unexpected line %q", l)
		}
		sawEtc = true
	}
	if !sawEtc {
		t.Error("ostree diff shows no added /etc")
	}
	vm, _ := os.ReadFile(filepath.Join(sysroot, info.Vmlinuz))
	ir, _ := os.ReadFile(filepath.Join(sysroot, info.Initramfs))
	sum := sha256.Sum256(append(vm, ir...))
	if hex.EncodeToString(sum[:]) != info.Bootcsum {
		t.Errorf("sha256(vmlinuz||initramfs) = %x, bootcsum %s", sum, info.Bootcsum)
	}
	// The BLS entry has the format of the real one (fixture), with our
	// stateroot, bootcsum and kernel version.
	bls, err := os.ReadFile(filepath.Join(sysroot, info.BLSEntry))
	if err != nil {
		t.Fatal(err)
	}
	wantBLS := "title Test CoreOS 42.20250101.0 (ostree:0)\nversion 1\n" +
		"options rw console=ttyS0 ostree=/ostree/boot.1/" + testOS + "/" + info.Bootcsum + "/0\n" +
		"linux /ostree/" + testOS + "-" + info.Bootcsum + "/vmlinuz-" + testKver + "\n" +
		"initrd /ostree/" + testOS + "-" + info.Bootcsum + "/initramfs-" + testKver + ".img\n"
	if string(bls) != wantBLS {
		t.Errorf("BLS entry:\n%s\nwant:\n%s", bls, wantBLS)
	}
	t.Run("bls-fixture", func(t *testing.T) { checkAgainstFixture(t, string(bls)) })
	// Deployed /usr files are hardlinks of the repo objects; /etc is a copy.
	var hello, object, passwd syscall.Stat_t
	syscall.Lstat(filepath.Join(sysroot, info.DeployPath, "usr/bin/hello"), &hello)
	syscall.Lstat(filepath.Join(sysroot, info.DeployPath, "etc/passwd"), &passwd)
	helloIno, _ := res.Root.Lookup("usr/bin/hello")
	var helloSum string
	for sum, ino := range objectsOf(res) {
		if ino == helloIno {
			helloSum = sum
		}
	}
	syscall.Lstat(filepath.Join(repo, ObjectPath(helloSum, ObjFile)), &object)
	if hello.Nlink < 2 || hello.Ino != object.Ino {
		t.Errorf("usr/bin/hello (nlink %d) is not the repo object %s", hello.Nlink, helloSum)
	}
	if passwd.Nlink != 1 {
		t.Errorf("etc/passwd has nlink %d, want a copy", passwd.Nlink)
	}
	origin, _ := os.ReadFile(filepath.Join(sysroot, info.DeployPath+".origin"))
	if string(origin) != "[origin]\ncontainer-image-reference=ostree-unverified-registry:"+testRef+"\n" {
		t.Errorf("origin file: %q", origin)
	}
	if out := testutil.Run(t, "ostree", "config", "--repo="+repo, "get", "core.mode"); strings.TrimSpace(out) != "bare" {
		t.Errorf("repo mode %q", out)
	}
	cfg, _ := os.ReadFile(filepath.Join(repo, "config"))
	if strings.Contains(string(cfg), "readonly") {
		t.Errorf("repo config sets readonly: %s", cfg)
	}
	md := testutil.Run(t, "ostree", "show", "--repo="+repo, "--print-metadata-key="+MetaManifestDigest, "ostree/1/1/0")
	if strings.Trim(strings.TrimSpace(md), "'") != res.ManifestDigest {
		t.Errorf("merge commit %s = %s, want %s", MetaManifestDigest, md, res.ManifestDigest)
	}
	if out := testutil.Run(t, "ostree", "show", "--repo="+repo, "--print-metadata-key=ostree.bootable", res.BaseCommit); strings.TrimSpace(out) != "true" {
		t.Errorf("base commit ostree.bootable = %q", out)
	}
	refs := testutil.Run(t, "ostree", "refs", "--repo="+repo)
	for r := range res.Refs {
		if !strings.Contains(refs, r) {
			t.Errorf("ref %s missing from ostree refs:\n%s", r, refs)
		}
	}
}

// commitOf reads a commit object from the imported repository.
func commitOf(t testing.TB, res *ImportResult, sum string) Commit {
	t.Helper()
	ino, err := res.Repo.Lookup(ObjectPath(sum, ObjCommit))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := ino.Content.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	c, err := DecodeCommit(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// objectsOf maps content checksums to the repo's object inodes.
func objectsOf(res *ImportResult) map[string]*fstree.Inode {
	out := map[string]*fstree.Inode{}
	_ = res.Repo.Walk(func(p string, ino *fstree.Inode) error {
		if strings.HasSuffix(p, ".file") {
			out[strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(p, "objects/"), ".file"), "/", "")] = ino
		}
		return nil
	})
	return out
}

// checkAgainstFixture compares the BLS entry with the real one from the
// shared fixtures, modulo bootcsum and stateroot (the fixture uses the
// same kernel version and karg set).
func checkAgainstFixture(t *testing.T, bls string) {
	t.Helper()
	p := testutil.SharedFixtures(t, "ostree/bls-ostree-1-fedora-coreos.conf")
	real, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	csum := regexp.MustCompile(`[0-9a-f]{64}`)
	if a, b := csum.ReplaceAllString(string(real), "B"), csum.ReplaceAllString(bls, "B"); a != b {
		t.Errorf("BLS entry differs from the fixture:\n%s\nfixture:\n%s", b, a)
	}
}
