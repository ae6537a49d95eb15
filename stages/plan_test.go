package stages

import (
	"slices"
	"testing"

	"github.com/okd-project/scos-builder/builder"
	"github.com/okd-project/scos-builder/recipes"
)

type fixedTools struct{}

func (fixedTools) ToolVersion(name string) string { return name + " 1.0" }

func testConfig(t *testing.T) *Config {
	t.Helper()
	r, err := recipes.Get("scos")
	if err != nil {
		t.Fatal(err)
	}
	return &Config{OSImage: "oci:/fixtures/os:latest", OSImageDigest: "sha256:0123", Arch: "x86_64",
		Recipe: r, Release: "10.0.1", RootfsBuilder: "native", Version: "test", SourceDateEpoch: 1700000000,
		Labels: map[string]string{"com.coreos.osname": "scos"}}
}

func keys(t *testing.T, cfg *Config) map[string]string {
	t.Helper()
	plan, err := builder.NewPlan(New(cfg), fixedTools{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, s := range plan.Steps {
		m[s.Stage.Type()] = s.Key
	}
	return m
}

// changed lists the stages whose keys differ, in pipeline order.
func changed(a, b map[string]string) []string {
	var out []string
	for _, typ := range []string{TypePayloadResolve, TypeImageFetch, TypeOstreeImport, TypeSysrootDeploy, TypeLiveRootfs,
		TypeLiveInitrd, TypeLiveBootconfig, TypeISOMaster, TypeISOCustomize, TypeStreamEmit} {
		if a[typ] != b[typ] {
			out = append(out, typ)
		}
	}
	return out
}

func TestPlanShapeAndInvalidation(t *testing.T) {
	base := keys(t, testConfig(t))
	if len(base) != 9 {
		t.Fatalf("plan has %d stages: %v", len(base), base)
	}
	if again := keys(t, testConfig(t)); len(changed(base, again)) != 0 {
		t.Fatal("the same config gave different keys")
	}
	cases := []struct {
		name   string
		modify func(*Config)
		want   []string
	}{
		{"karg", func(c *Config) { c.Kargs = []string{"x=1"} }, []string{TypeLiveBootconfig, TypeISOMaster, TypeStreamEmit}},
		{"rootfs builder", func(c *Config) { c.RootfsBuilder = "mksquashfs" },
			[]string{TypeLiveRootfs, TypeLiveInitrd, TypeLiveBootconfig, TypeISOMaster, TypeStreamEmit}},
		{"base url", func(c *Config) { c.BaseURL = "https://example.com/" }, []string{TypeStreamEmit}},
		{"payload with the same OS image", func(c *Config) { c.Payload = "quay.io/okd/scos-release:next" }, []string{TypePayloadResolve}},
		{"image digest", func(c *Config) { c.OSImageDigest = "sha256:4567" },
			[]string{TypeImageFetch, TypeOstreeImport, TypeSysrootDeploy, TypeLiveRootfs, TypeLiveInitrd, TypeLiveBootconfig, TypeISOMaster, TypeStreamEmit}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.modify(cfg)
			if got := changed(base, keys(t, cfg)); !slices.Equal(got, tc.want) {
				t.Fatalf("changed %v, want %v", got, tc.want)
			}
		})
	}
	cfg := testConfig(t)
	cfg.Ignition = []byte(`{"ignition":{"version":"3.4.0"}}`)
	withIgn := keys(t, cfg)
	if withIgn[TypeISOCustomize] == "" || withIgn[TypeISOMaster] != base[TypeISOMaster] || withIgn[TypeStreamEmit] == base[TypeStreamEmit] {
		t.Fatalf("an Ignition config should add iso.customize after the unchanged iso.master: %v", withIgn)
	}
}

func TestPlanRefusesBadOptions(t *testing.T) {
	cfg := testConfig(t)
	cfg.RootfsBuilder = "mkfs.ext4"
	if _, err := builder.NewPlan(New(cfg), fixedTools{}, nil); err == nil {
		t.Fatal("unknown rootfs builder accepted")
	}
	cfg = testConfig(t)
	cfg.Release = ""
	if _, err := builder.NewPlan(New(cfg), fixedTools{}, nil); err == nil {
		t.Fatal("empty release accepted")
	}
}
