package buildcache

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPromote promotes a Gradle home of 1,000 files of 16 KiB (each
// synced) into a new generation on a local disk: the promotion's share
// of a seeding, next to Gradle's downloads.
func BenchmarkPromote(b *testing.B) {
	home := b.TempDir()
	data := make([]byte, 16<<10)
	for i := range 1000 {
		d := filepath.Join(home, "caches", "modules-2", "files-2.1", fmt.Sprintf("g%02d", i%50), fmt.Sprintf("m%d", i))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "a.jar"), data, 0o644)
	}
	root := b.TempDir()
	at := t0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		at = at.Add(time.Minute)
		if _, err := Promote(root, home, id(at, byte(i)), at); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "files/s")
}
