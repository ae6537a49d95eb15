package ostree

import "testing"

// Examples verified with ostree-ext (spec §1.5, fixtures/ostree/verify-commands.txt).
func TestEscapeRef(t *testing.T) {
	cases := map[string]string{
		"sha256:0f9d67890ac1e6dc3b25b562ecf8f5f8c4529833a95e7258ad8e7d3cec50d2a1": "sha256_3A_0f9d67890ac1e6dc3b25b562ecf8f5f8c4529833a95e7258ad8e7d3cec50d2a1",
		"ostree-unverified-registry:quay.io/example/testcoreos:stable":            "ostree-unverified-registry_3A_quay_2E_io/example/testcoreos_3A_stable",
		"localhost:5000/foo:latest":                                               "localhost_3A_5000/foo_3A_latest",
		"foo/bar/baz-blah/foo":                                                    "foo/bar/baz-blah/foo",
		"/foo/":                                                                   "_2F_foo_2F_",
		"a//b_c":                                                                  "a/_2F_b__c",
		"ostree-remote-registry:fedora:quay.io/fedora/fedora-coreos:stable": "ostree-remote-registry_3A_fedora_3A_quay_2E_io/fedora/fedora-coreos_3A_stable",
	}
	for in, want := range cases {
		if got := EscapeRef(in); got != want {
			t.Errorf("EscapeRef(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContainerImageRef(t *testing.T) {
	cases := map[string]string{
		"quay.io/x/y:1":                             "ostree-unverified-registry:quay.io/x/y:1",
		"docker://quay.io/x/y@sha256:abc":           "ostree-unverified-registry:quay.io/x/y@sha256:abc",
		"ostree-remote-registry:fedora:quay.io/x/y": "ostree-remote-registry:fedora:quay.io/x/y",
		"": "",
	}
	for in, want := range cases {
		if got := ContainerImageRef(in); got != want {
			t.Errorf("ContainerImageRef(%q) = %q, want %q", in, got, want)
		}
	}
}
