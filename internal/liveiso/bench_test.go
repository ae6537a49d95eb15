package liveiso

import (
	"os"
	"testing"

	"github.com/okd-project/scos-builder/internal/liveiso/liveisotest"
)

// benchmarkEmbed embeds a config in place into a fixture ISO grown (sparse)
// to size bytes: open, stage, write, fsync, verify, close.
func benchmarkEmbed(b *testing.B, size int64) {
	fx := liveisotest.One(b, "embed-areas-2023-07.x86_64")
	if err := os.Truncate(fx.Path, size); err != nil {
		b.Fatal(err)
	}
	config := []byte(`{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGmTc8jhbN7YOcFsd1bF6k4V6m2mDkH3vh1xhBbk5ut3 user@example"]}]}}`)
	if _, err := ValidateIgnition(config); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		iso, err := OpenForUpdate(fx.Path)
		if err != nil {
			b.Fatal(err)
		}
		if err := iso.EmbedIgnition(config, true); err != nil {
			b.Fatal(err)
		}
		if err := iso.Save(); err != nil {
			b.Fatal(err)
		}
		iso.Close()
	}
}

func BenchmarkEmbed1GiB(b *testing.B) { benchmarkEmbed(b, 1<<30) }
func BenchmarkEmbed4GiB(b *testing.B) { benchmarkEmbed(b, 4<<30) }
