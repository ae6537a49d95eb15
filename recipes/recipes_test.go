package recipes

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite recipe.schema.json")

func TestSchemaInSync(t *testing.T) {
	got, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("recipe.schema.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("recipe.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("recipe.schema.json is out of date with the Recipe struct: run go test ./recipes -update")
	}
}

func TestBuiltins(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("%d recipes", len(all))
	}
	scos, err := Get("scos")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(scos.OSTags, ",") != "stream-coreos,centos-stream-coreos-10,centos-stream-coreos-9" ||
		scos.OSName != "scos" || scos.ArtifactPrefix != "scos" || scos.Stream != "c10s" {
		t.Fatalf("scos = %+v", scos)
	}
	okd, err := Get("okd")
	if err != nil || okd.Name != "fcos" || okd.OSName != "fedora-coreos" {
		t.Fatalf("okd alias = %+v, %v", okd, err)
	}
	if r, err := ForOSTag("rhel-coreos-10"); err != nil || r.Name != "rhcos" {
		t.Fatalf("rhel-coreos-10 → %v, %v", r, err)
	}
	if r, err := ForOSTag("stream-coreos"); err != nil || r.Name != "scos" {
		t.Fatalf("stream-coreos → %v, %v", r, err)
	}
	_, err = Get("ubuntu")
	if err == nil || !strings.Contains(err.Error(), "fcos, okd, rhcos, scos") {
		t.Fatalf("unknown recipe error = %v", err)
	}
}

func TestStrictDecoding(t *testing.T) {
	_, err := Parse([]byte("name: x\nos-tags: [a]\nosname: x\nartifact-prefix: x\nstream: s\ndefaults: {live-rootfs-fstype: squashfs}\ncolour: blue\n"))
	if err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown key accepted: %v", err)
	}
	_, err = Parse([]byte("name: x\nos-tags: [a]\nosname: x\nartifact-prefix: x\nstream: s\ndefaults: {live-rootfs-fstype: ext4}\n"))
	if err == nil || !strings.Contains(err.Error(), "squashfs, erofs") {
		t.Fatalf("bad fstype accepted: %v", err)
	}
}
