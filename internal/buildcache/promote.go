// Package buildcache refreshes the read-only Gradle dependency cache that
// Kubernetes builds read (docs/builds.md, "The Gradle cache"): a seeding
// Job runs Gradle against a seed project, copies what it downloaded into
// a new generation on the cache claim, and only then switches the
// pointer builds resolve; generations no build can still be reading are
// removed at a later seeding.
//
// Layout of the cache claim:
//
//	current            -> generations/<id> (a relative symlink)
//	generations/<id>/  modules-2/…, a complete generation
//	retired/<id>       when <id> stopped being current (RFC 3339)
//	work/<id>/         a generation being written
package buildcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/build"
)

// Directories of the cache claim.
const (
	generationsDir = "generations"
	retiredDir     = "retired"
	workDir        = "work"
	// modulesDir is the part of a Gradle user home a read-only cache
	// holds: the downloaded modules and their metadata.
	modulesDir = "modules-2"
)

// KeepRetired is how long a generation stays after it stopped being
// current. A build resolves the pointer once, as its container starts
// (build.PinCacheCommand), and a Job ends by activeDeadlineSeconds, at
// most build.MaxTimeout after it started; so a build that took a
// generation took it before that generation was retired and is gone
// build.MaxTimeout after. The margin covers the container's grace period
// on termination and clock differences between the nodes of two
// seedings.
const KeepRetired = build.MaxTimeout + 10*time.Minute

// staleWork is the age past which a work directory is another seeding's
// leftover, not a seeding in progress: no seeding Job runs longer than
// build.MaxTimeout.
const staleWork = build.MaxTimeout + 10*time.Minute

// idPattern is a generation's id: the UTC time its seeding began, which
// sorts generations, and a random suffix. Being checked before use, an
// id never names a path outside the claim.
var idPattern = regexp.MustCompile(`^g[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$`)

const idTime = "20060102T150405Z"

// NewGenerationID returns the id of a generation seeded from now; rand
// supplies the suffix (3 bytes) that keeps two ids of one second apart.
func NewGenerationID(now time.Time, random [3]byte) string {
	return fmt.Sprintf("g%s-%x", now.UTC().Format(idTime), random[:])
}

// ValidID reports whether id is a generation id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// idStarted is when the seeding of id began.
func idStarted(id string) (time.Time, bool) {
	if !ValidID(id) {
		return time.Time{}, false
	}
	t, err := time.Parse(idTime, id[1:1+len(idTime)])
	return t, err == nil
}

// Generation is one generation on the claim that is not current.
type Generation struct {
	ID string
	// RetiredAt is when it stopped being current (or, never having been
	// current, when a seeding first found it); zero when unknown.
	RetiredAt time.Time
}

// Expired returns the ids of the generations a seeding at now removes:
// those retired at least keep ago. The current one is never among them,
// and one whose retirement is unknown stays (Promote records it first).
func Expired(gens []Generation, current string, now time.Time, keep time.Duration) []string {
	var out []string
	for _, g := range gens {
		if g.ID == current || g.RetiredAt.IsZero() || now.Sub(g.RetiredAt) < keep {
			continue
		}
		out = append(out, g.ID)
	}
	slices.Sort(out)
	return out
}

// Result is what a promotion did; the seeding Job's last container
// reports it as its termination message.
type Result struct {
	Generation string   `json:"generation"`
	Previous   string   `json:"previous,omitempty"`
	Files      int      `json:"files"`
	Bytes      int64    `json:"bytes"`
	Removed    []string `json:"removed,omitempty"`
	Kept       []string `json:"kept,omitempty"` // retired generations kept for builds that may still read them
	// RemovedCount and KeptCount are the totals when the lists are cut.
	RemovedCount int `json:"removed_count,omitempty"`
	KeptCount    int `json:"kept_count,omitempty"`
	// Warning says what cleaning up failed; the generation is current
	// all the same, and the next seeding tries again.
	Warning string `json:"warning,omitempty"`
}

// maxListed bounds the ids a Result lists, and maxWarning its warning, so
// that it fits a termination message (4 KiB, cut beyond).
const (
	maxListed  = 40
	maxWarning = 1000
)

// JSON is r as one line, small enough for a termination message: long
// lists are cut (RemovedCount and KeptCount keep the totals).
func (r *Result) JSON() []byte {
	c := *r
	c.RemovedCount, c.KeptCount = len(r.Removed), len(r.Kept)
	c.Removed = r.Removed[:min(len(r.Removed), maxListed)]
	c.Kept = r.Kept[:min(len(r.Kept), maxListed)]
	if len(c.Warning) > maxWarning {
		c.Warning = c.Warning[:maxWarning] + "…"
	}
	b, _ := json.Marshal(&c)
	return b
}

// Promote makes the modules Gradle downloaded into gradleHome the
// generation id on the cache claim at root (now is when the promotion
// begins), then the current one, then removes the generations and
// leftovers no build or seeding can still be using. Until the pointer is switched nothing a build can see has
// changed: a failure before leaves the pointer as it was (and removes
// this generation's partial copy). The switch is a rename of a new
// symlink over the pointer, atomic on a local and an NFS file system.
func Promote(root, gradleHome, id string, now time.Time) (*Result, error) {
	began := time.Now()
	if !ValidID(id) {
		return nil, fmt.Errorf("buildcache: %q is not a generation id", id)
	}
	src := filepath.Join(gradleHome, "caches", modulesDir)
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("buildcache: Gradle left no dependency cache at %s (did the seed project resolve any dependency?)", src)
	}
	for _, d := range []string{generationsDir, retiredDir, workDir} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("buildcache: %w", err)
		}
	}
	previous, err := currentID(root)
	if err != nil {
		return nil, err
	}
	res := &Result{Generation: id, Previous: previous}
	var warns []error
	final := filepath.Join(root, generationsDir, id)
	if previous != id { // not a pod re-running a promotion that had switched
		work := filepath.Join(root, workDir, id)
		if err := os.RemoveAll(work); err != nil {
			return nil, fmt.Errorf("buildcache: clearing %s: %w", work, err)
		}
		if err := copyModules(src, filepath.Join(work, modulesDir), res); err != nil {
			os.RemoveAll(work)
			return nil, err
		}
		if err := syncDir(work); err != nil {
			os.RemoveAll(work)
			return nil, err
		}
		if err := os.RemoveAll(final); err != nil {
			return nil, fmt.Errorf("buildcache: %w", err)
		}
		if err := os.Rename(work, final); err != nil {
			os.RemoveAll(work)
			return nil, fmt.Errorf("buildcache: %w", err)
		}
		if err := syncDir(filepath.Join(root, generationsDir)); err != nil {
			return nil, err
		}
		if err := switchPointer(root, id); err != nil {
			return nil, err
		}
		// now is when the promotion began; the previous generation is
		// retired only now, after the copy, which may have taken minutes
		// of the margin KeepRetired leaves.
		now = now.Add(time.Since(began))
		// From here on builds see the new generation, so a failure is a
		// warning of the result: reported as the seeding's failure, it
		// would claim the pointer is as it was. A retirement left
		// unrecorded is recorded by prune, or by the next seeding's.
		if err := syncDir(root); err != nil {
			warns = append(warns, err)
		}
		if previous != "" {
			if err := writeRetired(root, previous, now); err != nil {
				warns = append(warns, err)
			}
		}
	}
	if err := prune(root, id, now, res); err != nil {
		warns = append(warns, err)
	}
	if len(warns) > 0 {
		res.Warning = errors.Join(warns...).Error()
	}
	return res, nil
}

// currentID is the generation the pointer names, "" when there is none.
func currentID(root string) (string, error) {
	p := filepath.Join(root, build.CachePointer)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("buildcache: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return "", fmt.Errorf("buildcache: %s is not a symlink; move it away (a seeding replaces the pointer by renaming a symlink over it)", p)
	}
	target, err := os.Readlink(p)
	if err != nil {
		return "", fmt.Errorf("buildcache: %w", err)
	}
	id, ok := strings.CutPrefix(filepath.ToSlash(target), generationsDir+"/")
	if !ok || !ValidID(id) {
		return "", fmt.Errorf("buildcache: the pointer %s names %q, not a generation", p, target)
	}
	return id, nil
}

func switchPointer(root, id string) error {
	tmp := filepath.Join(root, build.CachePointer+".new-"+id)
	os.Remove(tmp)
	if err := os.Symlink(generationsDir+"/"+id, tmp); err != nil {
		return fmt.Errorf("buildcache: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(root, build.CachePointer)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("buildcache: switching the pointer: %w", err)
	}
	return nil
}

func writeRetired(root, id string, at time.Time) error {
	p := filepath.Join(root, retiredDir, id)
	if err := atomicfile.WriteFile(p, []byte(at.UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("buildcache: %w", err)
	}
	return nil
}

func readRetired(root, id string) time.Time {
	b, err := os.ReadFile(filepath.Join(root, retiredDir, id))
	if err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}
	}
	return t
}

// prune removes expired generations, other seedings' stale work
// directories and pointer temporaries, and records a retirement time for
// each generation lacking one (a seeding that died between switching and
// recording, a generation that was never current): recorded late, it is
// kept longer, never shorter.
func prune(root, current string, now time.Time, res *Result) error {
	entries, err := os.ReadDir(filepath.Join(root, generationsDir))
	if err != nil {
		return fmt.Errorf("buildcache: %w", err)
	}
	var gens []Generation
	for _, e := range entries {
		id := e.Name()
		if id == current || !ValidID(id) {
			continue
		}
		g := Generation{ID: id, RetiredAt: readRetired(root, id)}
		if g.RetiredAt.IsZero() {
			if err := writeRetired(root, id, now); err != nil {
				return err
			}
			g.RetiredAt = now
		}
		gens = append(gens, g)
	}
	expired := Expired(gens, current, now, KeepRetired)
	var errs []error
	for _, id := range expired {
		if err := os.RemoveAll(filepath.Join(root, generationsDir, id)); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(filepath.Join(root, retiredDir, id))
		res.Removed = append(res.Removed, id)
	}
	for _, g := range gens {
		if !slices.Contains(expired, g.ID) {
			res.Kept = append(res.Kept, g.ID)
		}
	}
	slices.Sort(res.Kept)
	works, _ := os.ReadDir(filepath.Join(root, workDir))
	for _, e := range works {
		if started, ok := idStarted(e.Name()); e.Name() != current && (!ok || now.Sub(started) >= staleWork) {
			if err := os.RemoveAll(filepath.Join(root, workDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	tops, _ := os.ReadDir(root)
	for _, e := range tops {
		if id, ok := strings.CutPrefix(e.Name(), build.CachePointer+".new-"); ok {
			if started, ok := idStarted(id); ok && now.Sub(started) >= staleWork {
				os.Remove(filepath.Join(root, e.Name()))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("buildcache: the new generation is current, but removing old ones failed: %w", errors.Join(errs...))
	}
	return nil
}

// copyModules copies Gradle's modules directory into dst, leaving out its
// lock files and its cleanup bookkeeping (gc.properties), which a
// read-only cache must not have; directories and regular files only.
func copyModules(src, dst string, res *Result) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("buildcache: reading Gradle's cache: %w", err)
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular(), strings.HasSuffix(d.Name(), ".lock"), d.Name() == "gc.properties":
			return nil
		}
		n, err := copyFile(p, to)
		if err != nil {
			return fmt.Errorf("buildcache: copying %s: %w", rel, err)
		}
		res.Files++
		res.Bytes += n
		return nil
	})
}

// copyFile writes the file and syncs it: on NFS a rename may reach the
// server before data that was only closed, and a generation the pointer
// names must be whole after a server crash too.
func copyFile(from, to string) (int64, error) {
	in, err := openSource(from)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// openSource opens a file of Gradle's cache; a test makes it fail midway,
// as a volume that fills up or an NFS server that goes away would.
var openSource = os.Open

func syncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("buildcache: syncing %s: %w", dir, err)
	}
	return nil
}
