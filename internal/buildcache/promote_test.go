package buildcache

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/readloop"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func id(at time.Time, n byte) string { return NewGenerationID(at, [3]byte{0, 0, n}) }

// gradleHome is what Gradle leaves in a fresh user home after resolving
// a project: modules, their lock files and cleanup bookkeeping.
func gradleHome(t *testing.T, version string) string {
	t.Helper()
	h := t.TempDir()
	m := filepath.Join(h, "caches", "modules-2")
	files := map[string]string{
		"files-2.1/com.acme/lib/" + version + "/abc/lib-" + version + ".jar": "jar " + version,
		"files-2.1/com.acme/lib/" + version + "/def/lib-" + version + ".pom": "pom " + version,
		"metadata-2.106/descriptors/com.acme/lib/x":                          "meta",
		"modules-2.lock": "lock",
		"metadata-2.106/module-metadata.bin.lock": "lock",
		"gc.properties": "",
	}
	for p, c := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(m, p)), 0o755)
		os.WriteFile(filepath.Join(m, p), []byte(c), 0o644)
	}
	os.MkdirAll(filepath.Join(h, "wrapper", "dists"), 0o755) // not part of a read-only cache
	return h
}

func pointer(t *testing.T, root string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(root, build.CachePointer))
	if err != nil {
		return ""
	}
	return target
}

func TestPromoteSwitchesThePointerToACompleteGeneration(t *testing.T) {
	root := t.TempDir()
	g1 := id(t0, 1)
	res, err := Promote(root, gradleHome(t, "1.0"), g1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if pointer(t, root) != "generations/"+g1 || res.Generation != g1 || res.Previous != "" || res.Files != 3 {
		t.Fatalf("pointer %q, result %+v", pointer(t, root), res)
	}
	cur := filepath.Join(root, build.CachePointer, "modules-2")
	if b, err := os.ReadFile(filepath.Join(cur, "files-2.1/com.acme/lib/1.0/abc/lib-1.0.jar")); err != nil || string(b) != "jar 1.0" {
		t.Errorf("the jar through the pointer: %q, %v", b, err)
	}
	for _, gone := range []string{"modules-2.lock", "metadata-2.106/module-metadata.bin.lock", "gc.properties"} {
		if _, err := os.Stat(filepath.Join(cur, gone)); err == nil {
			t.Errorf("%s was copied into a read-only cache", gone)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, workDir)); len(entries) != 0 {
		t.Errorf("work directories left: %v", entries)
	}

	g2 := id(t0.Add(time.Hour), 2)
	res, err = Promote(root, gradleHome(t, "2.0"), g2, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if pointer(t, root) != "generations/"+g2 || res.Previous != g1 || !slices.Equal(res.Kept, []string{g1}) || len(res.Removed) != 0 {
		t.Fatalf("second seeding: pointer %q, result %+v", pointer(t, root), res)
	}
	if got := readRetired(root, g1); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("g1 retired at %v", got)
	}

	// A pod replaced after a disruption runs the same promotion again.
	res, err = Promote(root, gradleHome(t, "2.0"), g2, t0.Add(time.Hour+time.Minute))
	if err != nil || pointer(t, root) != "generations/"+g2 || !slices.Equal(res.Kept, []string{g1}) {
		t.Errorf("promotion run again: %+v, %v", res, err)
	}
}

func TestPromoteFailureLeavesThePointer(t *testing.T) {
	root := t.TempDir()
	g1 := id(t0, 1)
	if _, err := Promote(root, gradleHome(t, "1.0"), g1, t0); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Hour)
	// Gradle downloaded nothing (or wrote somewhere else).
	if _, err := Promote(root, t.TempDir(), id(later, 2), later); err == nil || !strings.Contains(err.Error(), "no dependency cache") {
		t.Errorf("an empty Gradle home = %v", err)
	}
	// An id that would name a path outside the claim.
	if _, err := Promote(root, gradleHome(t, "2.0"), "../"+id(later, 3), later); err == nil {
		t.Error("an id naming a path outside the claim was taken")
	}
	// The copy breaks midway, as on a volume that fills up.
	var n atomic.Int32
	openSource = func(p string) (*os.File, error) {
		if n.Add(1) == 2 {
			return nil, syscall.ENOSPC
		}
		return os.Open(p)
	}
	t.Cleanup(func() { openSource = os.Open })
	g4 := id(later, 4)
	if _, err := Promote(root, gradleHome(t, "2.0"), g4, later); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a copy that broke midway = %v", err)
	}
	openSource = os.Open
	if pointer(t, root) != "generations/"+g1 {
		t.Errorf("after the failures the pointer is %q, want generation %s", pointer(t, root), g1)
	}
	for _, d := range []string{filepath.Join(root, workDir, g4), filepath.Join(root, generationsDir, g4)} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s left after a failed copy", d)
		}
	}
	if !readRetired(root, g1).IsZero() {
		t.Error("the current generation was recorded as retired")
	}

	// A pointer that is not a symlink (made by hand) is not replaced.
	root2 := t.TempDir()
	os.Mkdir(filepath.Join(root2, build.CachePointer), 0o755)
	if _, err := Promote(root2, gradleHome(t, "1.0"), g1, t0); err == nil || !strings.Contains(err.Error(), "not a symlink") {
		t.Errorf("a directory as the pointer = %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(root2, build.CachePointer)); err != nil || !fi.IsDir() {
		t.Error("the hand-made pointer was changed")
	}
}

// The cleanup rule: a generation goes once it has been retired for
// KeepRetired, never the current one, never one whose retirement is
// unknown.
// TestPromoteFailureAfterTheSwitchIsAWarning: once the pointer names the
// new generation, builds use it; a step that fails after (recording the
// previous generation's retirement) must not fail the promotion, whose
// failure the seeding command reports as "the pointer is as it was".
func TestPromoteFailureAfterTheSwitchIsAWarning(t *testing.T) {
	root := t.TempDir()
	g1, g2 := id(t0, 1), id(t0.Add(time.Hour), 2)
	if _, err := Promote(root, gradleHome(t, "1.0"), g1, t0); err != nil {
		t.Fatal(err)
	}
	// A directory that is not empty where the retirement record goes makes
	// writing it fail.
	if err := os.MkdirAll(filepath.Join(root, retiredDir, g1, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Promote(root, gradleHome(t, "2.0"), g2, t0.Add(time.Hour))
	if err != nil {
		t.Fatalf("the pointer was switched, yet the promotion failed: %v", err)
	}
	if p := pointer(t, root); p != generationsDir+"/"+g2 {
		t.Fatalf("pointer %q, want generations/%s", p, g2)
	}
	if res.Warning == "" || !strings.Contains(res.Warning, g1) {
		t.Errorf("warning %q, want one naming the unrecorded retirement of %s", res.Warning, g1)
	}
	if res.Generation != g2 || res.Previous != g1 {
		t.Errorf("result %+v", res)
	}
}

// TestPromoteRecordsTheRetirementAtTheSwitch: the previous generation is
// retired when the pointer stops naming it, which is after the copy; a
// build that took it just before may read it for MaxTimeout from then.
// Recorded as of the promotion's start, a long copy would eat the margin
// of KeepRetired, and a later seeding remove a generation still read.
func TestPromoteRecordsTheRetirementAtTheSwitch(t *testing.T) {
	root := t.TempDir()
	g1, g2 := id(t0, 1), id(t0.Add(time.Hour), 2)
	if _, err := Promote(root, gradleHome(t, "1.0"), g1, t0); err != nil {
		t.Fatal(err)
	}
	const copying = 1100 * time.Millisecond // one file is slow to copy
	var once sync.Once
	openSource = func(p string) (*os.File, error) {
		once.Do(func() { time.Sleep(copying) })
		return os.Open(p)
	}
	t.Cleanup(func() { openSource = os.Open })
	began := t0.Add(time.Hour)
	if _, err := Promote(root, gradleHome(t, "2.0"), g2, began); err != nil {
		t.Fatal(err)
	}
	if got := readRetired(root, g1); got.Before(began.Add(time.Second)) {
		t.Errorf("%s recorded as retired at %s, before the switch (the copy took %s from %s)", g1, got, copying, began)
	}
}

func TestExpired(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	gens := []Generation{
		{ID: "cur", RetiredAt: now.Add(-5 * time.Hour)}, // current again: never removed
		{ID: "long-ago", RetiredAt: now.Add(-KeepRetired - time.Second)},
		{ID: "at-limit", RetiredAt: now.Add(-KeepRetired)},
		{ID: "just-retired", RetiredAt: now.Add(-time.Minute)},
		{ID: "within-a-build", RetiredAt: now.Add(-build.MaxTimeout)},
		{ID: "unknown"},
	}
	got := Expired(gens, "cur", now, KeepRetired)
	if want := []string{"at-limit", "long-ago"}; !slices.Equal(got, want) {
		t.Errorf("Expired = %v, want %v", got, want)
	}
	if KeepRetired <= build.MaxTimeout {
		t.Errorf("KeepRetired %v does not outlast the longest build, %v", KeepRetired, build.MaxTimeout)
	}
}

// Seedings more often than the longest build keep every generation a
// build may still read; older ones go at a later seeding; leftovers of
// dead seedings go once no seeding can still be writing them.
func TestPromotePrunes(t *testing.T) {
	root := t.TempDir()
	var ids []string
	for i := range 4 { // every 30 minutes
		at := t0.Add(time.Duration(i) * 30 * time.Minute)
		g := id(at, byte(i))
		ids = append(ids, g)
		res, err := Promote(root, gradleHome(t, "1.0"), g, at)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Removed) != 0 {
			t.Fatalf("seeding %d removed %v, all retired within %v", i, res.Removed, KeepRetired)
		}
	}
	// Leftovers: a dead seeding's work directory, a generation that was
	// never current (a seeding that died between its rename and the
	// switch), a recent work directory (a seeding that may be running).
	staleW := id(t0.Add(-3*time.Hour), 9)
	os.MkdirAll(filepath.Join(root, workDir, staleW, "modules-2"), 0o755)
	orphan := id(t0.Add(-3*time.Hour), 8)
	os.MkdirAll(filepath.Join(root, generationsDir, orphan, "modules-2"), 0o755)
	at := t0.Add(2 * time.Hour)
	freshW := id(at, 7)
	os.MkdirAll(filepath.Join(root, workDir, freshW), 0o755)

	g := id(at, 5)
	res, err := Promote(root, gradleHome(t, "1.0"), g, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 0 || !slices.Contains(res.Kept, orphan) || !readRetired(root, orphan).Equal(at) {
		t.Errorf("at 2h: %+v; the orphan's retirement %v", res, readRetired(root, orphan))
	}
	if _, err := os.Stat(filepath.Join(root, workDir, staleW)); err == nil {
		t.Error("a dead seeding's work directory was kept")
	}
	if _, err := os.Stat(filepath.Join(root, workDir, freshW)); err != nil {
		t.Error("a recent work directory (a seeding that may be running) was removed")
	}

	// Well past KeepRetired: everything retired before 2h goes; what was
	// current until this seeding stays.
	later := at.Add(KeepRetired + time.Minute)
	g6 := id(later, 6)
	res, err = Promote(root, gradleHome(t, "1.0"), g6, later)
	if err != nil {
		t.Fatal(err)
	}
	wantRemoved := append(slices.Clone(ids), orphan)
	slices.Sort(wantRemoved)
	if !slices.Equal(res.Removed, wantRemoved) || !slices.Equal(res.Kept, []string{g}) || res.Previous != g {
		t.Errorf("past the limit: removed %v (want %v), kept %v (want %v)", res.Removed, wantRemoved, res.Kept, []string{g})
	}
	left, _ := os.ReadDir(filepath.Join(root, generationsDir))
	if len(left) != 2 {
		t.Errorf("generations left: %v", left)
	}
}

// Builds resolving the pointer while seedings switch it always find a
// whole generation.
func TestReadersSeeAWholeGeneration(t *testing.T) {
	root := t.TempDir()
	if _, err := Promote(root, gradleHome(t, "0"), id(t0, 0), t0); err != nil {
		t.Fatal(err)
	}
	// A read sees a whole generation: both files of its one version.
	read := func() bool {
		gen, err := filepath.EvalSymlinks(filepath.Join(root, build.CachePointer))
		if err != nil {
			return false
		}
		entries, err := os.ReadDir(filepath.Join(gen, "modules-2", "files-2.1", "com.acme", "lib"))
		if err != nil || len(entries) != 1 {
			return false
		}
		v := entries[0].Name()
		jar, err1 := os.ReadFile(filepath.Join(gen, "modules-2", "files-2.1", "com.acme", "lib", v, "abc", "lib-"+v+".jar"))
		pom, err2 := os.ReadFile(filepath.Join(gen, "modules-2", "files-2.1", "com.acme", "lib", v, "def", "lib-"+v+".pom"))
		return err1 == nil && err2 == nil && string(jar) == "jar "+v && string(pom) == "pom "+v
	}
	reads, bad := readloop.Run(read, func() {
		for i := 1; i <= 20; i++ {
			at := t0.Add(time.Duration(i) * time.Minute)
			if _, err := Promote(root, gradleHome(t, string(rune('a'+i))), id(at, byte(i)), at); err != nil {
				t.Fatal(err)
			}
		}
	})
	if bad != 0 || reads == 0 {
		t.Errorf("%d of %d reads found a missing or partial generation", bad, reads)
	}
}

// A result always fits a termination message (4 KiB; the kubelet cuts
// what is longer, and the seeding command could not read it).
func TestResultFitsATerminationMessage(t *testing.T) {
	r := &Result{Generation: id(t0, 1), Previous: id(t0, 0), Warning: strings.Repeat("x", 5000)}
	for i := range 300 {
		r.Removed = append(r.Removed, id(t0.Add(-time.Duration(i)*time.Hour), byte(i)))
		r.Kept = append(r.Kept, id(t0.Add(-time.Duration(i)*time.Minute), byte(i)))
	}
	b := r.JSON()
	if len(b) > 4096 {
		t.Fatalf("%d bytes", len(b))
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.RemovedCount != 300 || back.KeptCount != 300 || len(back.Removed) != maxListed || back.Generation != r.Generation {
		t.Errorf("%+v, %v", back, err)
	}
	if len(r.Removed) != 300 {
		t.Error("JSON changed the result")
	}
}
