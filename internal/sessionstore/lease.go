package sessionstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
)

// A session's lease lives in its lease/ directory as one file per fencing
// number, named by the number (zero-padded, so names sort numerically):
//
//	lease/00000000000000000007  {"holder":"worker-a","addr":"http://10.1.2.3:8080","expires_at":"…","released":false}
//
// addr, when the holder advertises one, is where its peers reach it: a
// replica asked about a conversation another one holds forwards the
// command there (docs/sessions.md). Lease files written before it existed
// have none, and parse all the same.
//
// The highest-numbered file is the lease. Taking it over means creating the
// next number, which is atomic on every filesystem including NFS: the file
// is written under a temporary name and hard-linked to its final name, and
// link(2) fails if the name exists (the classic NFS-safe lock; flock gives no
// mutual exclusion between NFS clients). Only the holder rewrites its own
// file (renewal, release), by rename.

// Lease timing defaults.
const (
	DefaultLeaseTTL = 30 * time.Second
	// MaxClockSkew is how far apart the clocks of two workers sharing a
	// volume may be. A holder stops writing this long before its lease
	// expires, and a taker waits this long after: the two never overlap.
	MaxClockSkew = 2 * time.Second
)

// ErrLeaseHeld is returned when another holder owns a live lease.
var ErrLeaseHeld = errors.New("session lease held by another owner")

// ErrFenced is returned by writes after the lease was lost or released.
var ErrFenced = errors.New("session lease lost: writes are fenced off")

// LeaseHolderError says who holds a lease; it wraps ErrLeaseHeld.
type LeaseHolderError struct {
	Holder string
	// Addr is the base URL the holder's peers reach it at; empty when it
	// advertises none.
	Addr      string
	ExpiresAt time.Time
}

func (e *LeaseHolderError) Error() string {
	return fmt.Sprintf("session lease held by %s until %s", e.Holder, e.ExpiresAt.Format(time.RFC3339))
}

func (e *LeaseHolderError) Unwrap() error { return ErrLeaseHeld }

type leaseFile struct {
	Holder    string    `json:"holder"`
	Addr      string    `json:"addr,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	Released  bool      `json:"released,omitempty"`
}

// lease is a held lease.
type lease struct {
	dir     string
	holder  string
	addr    string
	fence   uint64
	expires time.Time
	taken   time.Time  // when it was taken, by the store's clock
	beats   *Heartbeat // this process's beats; nil: the expiry alone counts
}

const leaseDir = "lease"

func leaseName(fence uint64) string { return fmt.Sprintf("%020d", fence) }

// currentLease returns the highest fence in dir and its content (fence 0
// when there is none).
func currentLease(dir string) (uint64, leaseFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, leaseFile{}, nil
	}
	if err != nil {
		return 0, leaseFile{}, err
	}
	var fences []uint64
	for _, e := range entries {
		if n, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && len(e.Name()) == 20 {
			fences = append(fences, n)
		}
	}
	if len(fences) == 0 {
		return 0, leaseFile{}, nil
	}
	sort.Slice(fences, func(i, j int) bool { return fences[i] > fences[j] })
	b, err := os.ReadFile(filepath.Join(dir, leaseName(fences[0])))
	if err != nil {
		return 0, leaseFile{}, err
	}
	var lf leaseFile
	if err := json.Unmarshal(b, &lf); err != nil {
		// A lease file is written whole before it is linked into place; an
		// unreadable one is treated as expired rather than blocking forever.
		return fences[0], leaseFile{}, nil
	}
	return fences[0], lf, nil
}

// acquireLease takes the lease of a session directory for holder, who
// advertises addr (may be empty).
func (s *Store) acquireLease(sessionDir, holder, addr string, now time.Time) (*lease, error) {
	dir := filepath.Join(sessionDir, leaseDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		fence, cur, err := currentLease(dir)
		if err != nil {
			return nil, err
		}
		// A live lease under our own name belongs to an earlier opening:
		// this process before a crash and restart, or a Session of this
		// process still being closed. Take the next fence rather than share
		// that one, so the earlier opening is fenced off and its release
		// cannot give up the new lease.
		if li := s.leaseInfo(fence, cur); li.Live(now) && cur.Holder != holder {
			return nil, &LeaseHolderError{Holder: cur.Holder, Addr: cur.Addr, ExpiresAt: cur.ExpiresAt}
		}
		next := fence + 1
		l := &lease{dir: dir, holder: holder, addr: addr, fence: next, expires: now.Add(s.opts.LeaseTTL), taken: now, beats: s.opts.Heartbeat}
		ok, err := createExclusive(filepath.Join(dir, leaseName(next)), l.content())
		if err != nil {
			return nil, err
		}
		if ok {
			removeOldLeases(dir, next)
			return l, nil
		}
		// Someone else created that number first: look again.
	}
	return nil, fmt.Errorf("%w: lost the race for the lease repeatedly", ErrLeaseHeld)
}

func (l *lease) content() []byte {
	b, _ := json.Marshal(leaseFile{Holder: l.holder, Addr: l.addr, ExpiresAt: l.expires.UTC()})
	return b
}

// createExclusive writes data under a temporary name and links it to path;
// false when path exists. A lost reply to link over NFS is recognised by the
// temporary file's link count.
func createExclusive(path string, data []byte) (bool, error) {
	tmp, err := writeTemp(filepath.Dir(path), data)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	err = os.Link(tmp, path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if st, serr := os.Stat(tmp); serr == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink == 2 {
			return true, nil
		}
	}
	return false, err
}

// removeOldLeases keeps the last few lease files, so a directory listing
// stays short.
func removeOldLeases(dir string, current uint64) {
	for f := current; f > 3; f-- {
		old := filepath.Join(dir, leaseName(f-3))
		if err := os.Remove(old); err != nil {
			return
		}
	}
}

// valid reports whether the holder may still write at now: not after its
// own expiry less the clock skew, and, among replicas, while its beats
// allow it (Heartbeat).
func (l *lease) valid(now time.Time) bool {
	return l != nil && now.Before(l.expires.Add(-MaxClockSkew)) && l.beats.allows(l.taken, now)
}

// renew extends the lease, first checking that nobody has taken it over.
func (l *lease) renew(ttl time.Duration, now time.Time) error {
	fence, cur, err := currentLease(l.dir)
	if err != nil {
		return err
	}
	if fence != l.fence || cur.Holder != l.holder || cur.Released || l.beats.lost(l.taken) {
		return ErrFenced
	}
	if !now.Before(l.expires) {
		// Expired: another owner may already be writing under a newer
		// number that the listing raced with; never resurrect.
		return ErrFenced
	}
	l.expires = now.Add(ttl)
	return replaceUnsynced(filepath.Join(l.dir, leaseName(l.fence)), l.content())
}

// replaceUnsynced replaces path with data, atomically for readers but
// without an fsync. A renewal need not survive a crash: a lost one leaves
// an earlier expiry on disk, so another worker takes over sooner, and the
// holder that crashed writes nothing more anyway. Syncing it cost a
// worker under load its leases: thousands of renewals each waiting for the
// disk behind the turns' own syncs took longer than a lease lives. Other
// readers see the new file at once (the page cache; on NFS at close).
func replaceUnsynced(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// release gives the lease up at once, so another owner need not wait for it
// to expire.
func (l *lease) release() error {
	fence, cur, err := currentLease(l.dir)
	if err != nil || fence != l.fence || cur.Holder != l.holder {
		return err
	}
	b, _ := json.Marshal(leaseFile{Holder: l.holder, Addr: l.addr, ExpiresAt: l.expires.UTC(), Released: true})
	l.expires = time.Time{}
	return atomicfile.WriteFile(filepath.Join(l.dir, leaseName(l.fence)), b, 0o600)
}

func writeTemp(dir string, data []byte) (string, error) {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}
