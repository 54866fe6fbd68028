// Package replicaset is the registry of a tenant-env's worker replicas on
// the session volume they share: each replica publishes its address and
// load there, and reads the others' to place and forward conversations.
//
// Each replica owns one file, {dir}/{holder}.json, rewritten whole
// (atomically) every interval:
//
//	{"holder":"worker-7c9f-x2","addr":"http://10.1.2.3:8080","running_turns":3,
//	 "max_running_turns":64,"open_sessions":41,"draining":false,
//	 "updated_at":"2026-12-06T14:15:33Z"}
//
// A file not rewritten for StaleAfter intervals is a replica that went
// away without removing it (a crash, a killed pod): it is ignored, and
// after RemoveAfter intervals deleted. The volume is the one thing every
// replica already shares, so no Kubernetes API (and no permission to call
// it) is needed to know one's peers.
package replicaset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/defaults"
)

// Entry is what one replica publishes about itself.
type Entry struct {
	// Holder is the replica's name in session leases, and its file's name.
	Holder string `json:"holder"`
	// Addr is the base URL its peers reach its command API at.
	Addr string `json:"addr"`
	// RunningTurns is how many turns it runs now, MaxRunningTurns its
	// bound on them (0: none).
	RunningTurns    int `json:"running_turns"`
	MaxRunningTurns int `json:"max_running_turns"`
	// OpenSessions is how many conversations it holds open (and leased).
	OpenSessions int `json:"open_sessions"`
	// Draining is set once it has begun to shut down: it takes no new
	// conversation, though it still runs (and lists) its last turns.
	Draining  bool      `json:"draining,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	// BeatWindowMS is the replica's promise about its session leases: it
	// writes under them only while UpdatedAt plus this many milliseconds
	// (less the clock skew sessionstore allows) has not passed, unless it
	// publishes again, so a peer may take them over once it has (plus
	// that skew), without waiting out each lease. 0 (an older replica):
	// no promise, the leases' own expiry counts.
	BeatWindowMS int64 `json:"beat_window_ms,omitempty"`
}

// TurnLoad is the share of its bound the replica's running turns take,
// 0 with no bound.
func (e Entry) TurnLoad() float64 {
	if e.MaxRunningTurns <= 0 {
		return 0
	}
	return float64(e.RunningTurns) / float64(e.MaxRunningTurns)
}

// Full reports whether the replica runs its most turns at once.
func (e Entry) Full() bool { return e.MaxRunningTurns > 0 && e.RunningTurns >= e.MaxRunningTurns }

// Defaults and bounds.
const (
	DefaultInterval = 2 * time.Second
	// StaleAfter is how many intervals an entry may go without a rewrite
	// before it is ignored: two missed beats are a slow disk, three a
	// replica that is gone.
	StaleAfter = 3
	// RemoveAfter is how many intervals after its last rewrite a stale
	// entry is deleted; until then it only costs a read.
	RemoveAfter = 150
	// maxEntryBytes bounds what is read of one file.
	maxEntryBytes = 4 << 10
	// MinBeatWindow and BeatWindowIntervals set a replica's beat window
	// (Entry.BeatWindowMS): BeatWindowIntervals intervals, at least
	// MinBeatWindow. A peer then takes a crashed replica's conversations
	// over some 10 s after its last beat rather than up to a lease's TTL
	// (30 s) and its skew later; a replica stops writing its sessions 8 s
	// (the window less the skew) after its last beat that got written, so
	// a volume that stalls its beats for 6 to 8 s stops it until it beats
	// again, and it reopens them then.
	MinBeatWindow       = 10 * time.Second
	BeatWindowIntervals = 5
	// maxBeatWindow bounds a window read from a peer's entry.
	maxBeatWindow = 10 * time.Minute
	// MaxHolderLen bounds a holder's name (a pod name is at most 253).
	MaxHolderLen = 253
)

// ErrInvalidHolder is a holder name that cannot name a file.
var ErrInvalidHolder = errors.New("replicaset: invalid holder name")

// ValidateHolder checks that holder can name a file of its own in the
// registry: 1..MaxHolderLen letters, digits, '.', '-' and '_', starting
// with a letter or digit, so that "..", "/" or a hidden name never occur.
func ValidateHolder(holder string) error {
	if holder == "" || len(holder) > MaxHolderLen {
		return fmt.Errorf("%w: %q: 1 to %d characters", ErrInvalidHolder, holder, MaxHolderLen)
	}
	for i := 0; i < len(holder); i++ {
		c := holder[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0:
		default:
			return fmt.Errorf("%w: %q: letters, digits, '.', '-' and '_' only, starting with a letter or digit", ErrInvalidHolder, holder)
		}
	}
	return nil
}

// ValidateAddr checks that addr is a base URL a peer may be forwarded to:
// http or https, a host, and nothing else (no credentials, path, query).
func ValidateAddr(addr string) error {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("replicaset: address %q: want http://HOST:PORT", addr)
	}
	return nil
}

// Options configure a Registry; zero fields mean their defaults.
type Options struct {
	// Interval is how often Run rewrites this replica's entry and reads
	// the others'; default DefaultInterval.
	Interval time.Duration
	Now      func() time.Time
	Logger   *slog.Logger // nil: don't log
	// OnBeat, when set, is told of every entry written: the time it
	// carries, when the write had ended, and its beat window. The session
	// store's Heartbeat takes it (sessionstore.Heartbeat.Beat).
	OnBeat func(stamp, done time.Time, window time.Duration)
}

// Registry is one replica's view of the registry directory. Its methods
// are safe for concurrent use.
type Registry struct {
	dir    string
	holder string
	opts   Options

	// writeMu serialises this replica's writes of its own file, so that
	// the last one written is the last state computed.
	writeMu sync.Mutex
	removed bool // guarded by writeMu: Remove ran; nothing is written again

	mu sync.Mutex
	// guarded by mu
	peers []Entry // the other replicas' fresh entries, as last read
	gen   uint64  // counts the reads
}

// New returns the registry in dir (created if missing) for the replica
// named holder.
func New(dir, holder string, opts *Options) (*Registry, error) {
	if err := ValidateHolder(holder); err != nil {
		return nil, err
	}
	o := defaults.Copy(opts)
	defaults.IfNotPositive(&o.Interval, DefaultInterval)
	defaults.Clock(&o.Now)
	defaults.Logger(&o.Logger)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("replicaset: %w", err)
	}
	return &Registry{dir: dir, holder: holder, opts: o}, nil
}

// Holder is this replica's name.
func (r *Registry) Holder() string { return r.holder }

// Interval is how often entries are rewritten.
func (r *Registry) Interval() time.Duration { return r.opts.Interval }

// BeatWindow is how long after each entry written this replica may write
// under its session leases (Entry.BeatWindowMS).
func (r *Registry) BeatWindow() time.Duration {
	return max(MinBeatWindow, BeatWindowIntervals*r.opts.Interval)
}

// BeatEnds returns when holder's promise ends, by its last entry on the
// volume (its time plus its beat window); zero when it has no entry or
// made no promise, and then its leases' own expiry counts. For the
// session store (sessionstore.Options.PeerBeatEnds).
func (r *Registry) BeatEnds(holder string) time.Time { return BeatEnds(r.dir, holder) }

// BeatEnds is Registry.BeatEnds for a process that is no replica (a
// maintenance tool on the session volume): it reads the registry in dir
// and writes nothing.
func BeatEnds(dir, holder string) time.Time {
	if ValidateHolder(holder) != nil {
		return time.Time{} // a lease of a retention tool, or not a replica's name
	}
	e, err := readEntry(dir, holder)
	if err != nil || e.BeatWindowMS <= 0 || e.BeatWindowMS > maxBeatWindow.Milliseconds() {
		return time.Time{}
	}
	return e.UpdatedAt.Add(time.Duration(e.BeatWindowMS) * time.Millisecond)
}

func entryPath(dir, holder string) string { return filepath.Join(dir, holder+".json") }

// Publish writes this replica's entry as self computes it now, under the
// write lock: of two publishes at once, the one written last is the one
// computed last. The holder and the time are filled in. After Remove it
// writes nothing.
func (r *Registry) Publish(self func() Entry) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.removed {
		return nil
	}
	e := self()
	stamp, window := r.opts.Now(), r.BeatWindow()
	e.Holder, e.UpdatedAt, e.BeatWindowMS = r.holder, stamp.UTC(), window.Milliseconds()
	if err := ValidateAddr(e.Addr); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(entryPath(r.dir, r.holder), append(b, '\n'), 0o600); err != nil {
		return err
	}
	if r.opts.OnBeat != nil {
		r.opts.OnBeat(stamp, r.opts.Now(), window)
	}
	return nil
}

// Remove deletes this replica's entry, for good: a replica that stops
// cleanly is known gone at once rather than after StaleAfter intervals.
func (r *Registry) Remove() error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.removed = true
	if err := os.Remove(entryPath(r.dir, r.holder)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Read reads the other replicas' fresh entries, deletes the very old
// ones, keeps what it read for Peers, and returns it sorted by holder. A
// file that is not a valid entry under its own name is skipped.
func (r *Registry) Read() ([]Entry, error) {
	des, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("replicaset: %w", err)
	}
	now := r.opts.Now()
	stale, gone := StaleAfter*r.opts.Interval, RemoveAfter*r.opts.Interval
	var peers []Entry
	for _, de := range des {
		holder, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !de.Type().IsRegular() || holder == r.holder || ValidateHolder(holder) != nil {
			continue // a temporary file of a write, or not ours to read
		}
		e, err := readEntry(r.dir, holder)
		if err != nil {
			r.opts.Logger.Debug("replica registry entry skipped", "file", de.Name(), "err", err)
			continue
		}
		switch age := now.Sub(e.UpdatedAt); {
		case age > gone:
			os.Remove(entryPath(r.dir, holder)) // another replica may have removed it first
		case age <= stale && age >= -stale: // a clock far ahead is as suspect as one far behind
			peers = append(peers, e)
		}
	}
	slices.SortFunc(peers, func(a, b Entry) int { return strings.Compare(a.Holder, b.Holder) })
	r.mu.Lock()
	r.peers, r.gen = peers, r.gen+1
	r.mu.Unlock()
	return slices.Clone(peers), nil
}

func readEntry(dir, holder string) (Entry, error) {
	b, err := atomicfile.ReadFile(entryPath(dir, holder), maxEntryBytes)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, err
	}
	if e.Holder != holder {
		return Entry{}, fmt.Errorf("entry of %q in the file of %q", e.Holder, holder)
	}
	if e.RunningTurns < 0 || e.MaxRunningTurns < 0 || e.OpenSessions < 0 {
		return Entry{}, errors.New("negative counts")
	}
	return e, ValidateAddr(e.Addr)
}

// Peers returns the other replicas' fresh entries as Run last read them,
// and the read's number: it changes whenever they are read anew.
func (r *Registry) Peers() ([]Entry, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.peers), r.gen
}

// Run publishes this replica's entry (computed by self) and reads the
// others' every interval until ctx ends, then removes the entry. A failed
// write or read is logged and tried again at the next beat: the volume
// may hiccup, and peers only stop seeing this replica after StaleAfter
// beats.
func (r *Registry) Run(ctx context.Context, self func() Entry) error {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		if err := r.Publish(self); err != nil {
			r.opts.Logger.Warn("could not publish this replica's registry entry", "err", err)
		}
		if _, err := r.Read(); err != nil {
			r.opts.Logger.Warn("could not read the replica registry", "err", err)
		}
		select {
		case <-ctx.Done():
			if err := r.Remove(); err != nil {
				r.opts.Logger.Warn("could not remove this replica's registry entry", "err", err)
			}
			return nil
		case <-t.C:
		}
	}
}
