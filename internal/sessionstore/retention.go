package sessionstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/contract"
)

// Retention: sessions are never deleted implicitly. Archive and Delete are
// the explicit operations behind `talkide sessions`; both first take the
// session's lease, so no worker can own the session while it moves, and a
// live owner makes them fail with ErrLeaseHeld unless forced.

// LeaseInfo is what a session's lease directory says.
type LeaseInfo struct {
	Holder    string
	Addr      string // where the holder's peers reach it; empty: not advertised
	Fence     uint64 // 0: the session has never been leased
	ExpiresAt time.Time
	Released  bool
	// BeatEnds is when the holder's beats stop covering its leases
	// (Heartbeat); zero when it keeps none a peer can read, and then
	// ExpiresAt alone counts.
	BeatEnds time.Time
}

// leaseInfo is what the lease file of fence says, and, among replicas,
// when its holder's beats end: read from the registry only for a lease
// still held by another, the one case it decides.
func (s *Store) leaseInfo(fence uint64, lf leaseFile) LeaseInfo {
	li := LeaseInfo{Holder: lf.Holder, Addr: lf.Addr, Fence: fence, ExpiresAt: lf.ExpiresAt, Released: lf.Released}
	if s.opts.PeerBeatEnds != nil && !li.Released && li.Holder != "" && li.Holder != s.opts.Holder {
		li.BeatEnds = s.opts.PeerBeatEnds(li.Holder)
	}
	return li
}

// Lease reads the lease of session id alone, without opening the session:
// what a replica looks at to learn whether another one holds a
// conversation, and where it is reached. A session never leased has the
// zero LeaseInfo; one not there is ErrNotFound.
func (s *Store) Lease(id string) (LeaseInfo, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return LeaseInfo{}, err
	}
	fence, lf, err := currentLease(filepath.Join(dir, leaseDir))
	if err != nil {
		return LeaseInfo{}, fmt.Errorf("sessionstore: %s: lease: %w", id, err)
	}
	if fence == 0 {
		return LeaseInfo{}, nil
	}
	return s.leaseInfo(fence, lf), nil
}

// Live reports whether the lease still keeps others out at now: held, not
// released, not past its expiry plus MaxClockSkew, and, when its holder's
// beats are known, not past their end plus MaxClockSkew (the rule a taker
// applies).
func (l LeaseInfo) Live(now time.Time) bool {
	return l.Fence > 0 && !l.Released && l.Holder != "" && now.Before(l.ExpiresAt.Add(MaxClockSkew)) &&
		(l.BeatEnds.IsZero() || now.Before(l.BeatEnds.Add(MaxClockSkew)))
}

// SessionInfo describes one session directory.
type SessionInfo struct {
	ID        string
	CreatedAt time.Time // from meta.json
	LastEvent time.Time // time of the newest event; zero when it has none
	LastSeq   int64
	Turns     int
	Size      int64 // bytes in the directory's files
	Lease     LeaseInfo
	// Problem says why the session could not be read (no or bad meta.json,
	// a corrupt log); then only ID, Size and Lease are set. Such a session
	// can still be archived or deleted.
	Problem error
}

// LastActive is the latest sign of use: the newest event, the lease's
// expiry (an owner renews it while the session is open) or the creation.
func (i SessionInfo) LastActive() time.Time {
	t := i.CreatedAt
	for _, u := range []time.Time{i.LastEvent, i.Lease.ExpiresAt} {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// RetentionOptions modify Archive and Delete. A nil *RetentionOptions is the
// zero value.
type RetentionOptions struct {
	// Force acts on a session whose lease is live by taking the lease over:
	// the owner is fenced off at its next renewal, but writes it makes
	// before then land in the moved (or deleted) files. For a holder known
	// to be gone.
	Force bool
	// DryRun makes every check the real call makes and changes nothing.
	DryRun bool
}

// List describes every session in the store, ordered by id. Directories
// whose names are not conversation ids are skipped.
func (s *Store) List() ([]SessionInfo, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	var out []SessionInfo
	for _, e := range entries {
		if !e.IsDir() || contract.ValidateConversationID(e.Name()) != nil {
			continue
		}
		info, err := s.Info(e.Name())
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Select returns the sessions named by ids, or every session when ids is
// empty, that have been idle at least idle at now (LastActive; every one
// when idle is 0), and an error for each name that could not be described
// (or for the listing), which names it. A repeated id counts once.
func (s *Store) Select(ids []string, idle time.Duration, now time.Time) ([]SessionInfo, []error) {
	var all []SessionInfo
	var failed []error
	if len(ids) == 0 {
		var err error
		if all, err = s.List(); err != nil {
			return nil, []error{fmt.Errorf("list: %w", err)}
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		info, err := s.Info(id)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", id, err))
			continue
		}
		all = append(all, info)
	}
	if idle <= 0 {
		return all, failed
	}
	var out []SessionInfo
	for _, i := range all {
		if now.Sub(i.LastActive()) >= idle {
			out = append(out, i)
		}
	}
	return out, failed
}

// Info describes the session id without disturbing an owner: it reads the
// session read-only (as Inspect does) and its lease directory.
func (s *Store) Info(id string) (SessionInfo, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return SessionInfo{}, err
	}
	info := SessionInfo{ID: id}
	if info.Size, err = dirSize(dir); err != nil {
		return SessionInfo{}, fmt.Errorf("sessionstore: %s: %w", id, err)
	}
	fence, lf, err := currentLease(filepath.Join(dir, leaseDir))
	if err != nil {
		return SessionInfo{}, fmt.Errorf("sessionstore: %s: lease: %w", id, err)
	}
	if fence > 0 {
		info.Lease = s.leaseInfo(fence, lf)
	}
	sess, err := s.Inspect(id)
	if errors.Is(err, ErrNotFound) {
		info.Problem = errors.New("no meta.json")
		return info, nil
	}
	if err != nil {
		info.Problem = err
		return info, nil
	}
	defer sess.Close()
	info.CreatedAt = sess.Meta().CreatedAt
	st := sess.State()
	info.LastSeq, info.Turns = st.LastSeq, st.Turns
	if st.LastSeq > 0 {
		err := sess.ReadEvents(st.LastSeq-1, func(ev contract.Event) error {
			info.LastEvent = ev.Time
			return nil
		})
		if err != nil {
			info.Problem = err
		}
	}
	return info, nil
}

// Archive moves the session id to archiveDir/<id>-<UTC time>, e.g.
// archive/projects/c1-20250301T120000Z, and returns that path. The moved
// directory keeps the format, so it is read with the same tools and
// restored by moving it back under the store's root with its id as name.
// archiveDir must be on the same filesystem as the store (a rename).
//
// It fails with ErrNotFound for a missing session, an error wrapping
// ErrLeaseHeld (a *LeaseHolderError) when the session's lease is live and
// opts.Force is not set, and os.ErrExist when the destination exists.
func (s *Store) Archive(id, archiveDir string, opts *RetentionOptions) (string, error) {
	o := retentionOptions(opts)
	dir, err := s.sessionDir(id)
	if err != nil {
		return "", err
	}
	if inside(s.root, archiveDir) {
		return "", fmt.Errorf("sessionstore: archive %s: the archive directory %s is inside the store %s", id, archiveDir, s.root)
	}
	now := s.opts.Now()
	dest := filepath.Join(archiveDir, id+"-"+now.UTC().Format("20060102T150405Z"))
	if _, err := os.Lstat(dest); err == nil {
		return "", fmt.Errorf("sessionstore: archive %s: %s: %w", id, dest, os.ErrExist)
	}
	l, err := s.retentionLease(dir, now, o)
	if err != nil || o.DryRun {
		return dest, err
	}
	if err := os.MkdirAll(archiveDir, 0o700); err != nil {
		l.release()
		return "", fmt.Errorf("sessionstore: archive %s: %w", id, err)
	}
	if err := os.Rename(dir, dest); err != nil {
		l.release()
		return "", fmt.Errorf("sessionstore: archive %s: %w", id, err)
	}
	syncDir(s.root)
	syncDir(archiveDir)
	// The archived copy is not owned by anyone: release the lease where it
	// now lives, so a restored session opens at once.
	l.dir = filepath.Join(dest, leaseDir)
	l.release()
	return dest, nil
}

// Delete removes the session id. The directory is first renamed to a hidden
// name in the store's root (so the session disappears at once, whole) and
// then removed; if removal fails, the error names what is left.
//
// Errors are as for Archive.
func (s *Store) Delete(id string, opts *RetentionOptions) error {
	o := retentionOptions(opts)
	dir, err := s.sessionDir(id)
	if err != nil {
		return err
	}
	now := s.opts.Now()
	l, err := s.retentionLease(dir, now, o)
	if err != nil || o.DryRun {
		return err
	}
	tomb := filepath.Join(s.root, ".deleted-"+id+"-"+strconv.FormatInt(now.UnixNano(), 10))
	if err := os.Rename(dir, tomb); err != nil {
		l.release()
		return fmt.Errorf("sessionstore: delete %s: %w", id, err)
	}
	syncDir(s.root)
	if err := os.RemoveAll(tomb); err != nil {
		return fmt.Errorf("sessionstore: delete %s: session removed from the store, but %s is left: %w", id, tomb, err)
	}
	return nil
}

func retentionOptions(opts *RetentionOptions) RetentionOptions {
	if opts == nil {
		return RetentionOptions{}
	}
	return *opts
}

// sessionDir validates id and returns its directory, which must exist and
// be a directory (not a symbolic link).
func (s *Store) sessionDir(id string) (string, error) {
	if err := contract.ValidateConversationID(id); err != nil {
		return "", err
	}
	dir := filepath.Join(s.root, id)
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("sessionstore: %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("sessionstore: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("sessionstore: %s is not a directory", dir)
	}
	return dir, nil
}

// retentionLease takes the session's lease for a retention operation, or,
// in a dry run, only checks that it could.
func (s *Store) retentionLease(dir string, now time.Time, o RetentionOptions) (*lease, error) {
	holder := "retention:" + s.opts.Holder
	if o.DryRun {
		fence, cur, err := currentLease(filepath.Join(dir, leaseDir))
		if err != nil {
			return nil, fmt.Errorf("sessionstore: %w", err)
		}
		li := s.leaseInfo(fence, cur)
		if li.Live(now) && cur.Holder != holder && !o.Force {
			return nil, &LeaseHolderError{Holder: cur.Holder, Addr: cur.Addr, ExpiresAt: cur.ExpiresAt}
		}
		return nil, nil
	}
	l, err := s.acquireLease(dir, holder, "", now)
	if err == nil || !o.Force || !errors.Is(err, ErrLeaseHeld) {
		return l, err
	}
	return takeLease(filepath.Join(dir, leaseDir), holder, s.opts.LeaseTTL, now)
}

// takeLease creates the next fence whatever the current lease says: a
// forced takeover. The old holder's next renewal finds the newer fence and
// fails with ErrFenced.
func takeLease(dir, holder string, ttl time.Duration, now time.Time) (*lease, error) {
	for attempt := 0; attempt < 8; attempt++ {
		fence, _, err := currentLease(dir)
		if err != nil {
			return nil, err
		}
		l := &lease{dir: dir, holder: holder, fence: fence + 1, expires: now.Add(ttl)}
		ok, err := createExclusive(filepath.Join(dir, leaseName(l.fence)), l.content())
		if err != nil {
			return nil, err
		}
		if ok {
			removeOldLeases(dir, l.fence)
			return l, nil
		}
	}
	return nil, fmt.Errorf("%w: lost the race for the lease repeatedly", ErrLeaseHeld)
}

// inside reports whether path is root or under it (lexically, after making
// both absolute).
func inside(root, path string) bool {
	r, err1 := filepath.Abs(root)
	p, err2 := filepath.Abs(path)
	if err1 != nil || err2 != nil {
		return true // refuse what cannot be placed
	}
	rel, err := filepath.Rel(r, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a temporary file that went away
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

// syncDir makes a rename in dir durable; best effort: the rename is done,
// and a failure to record it durably must not undo what follows.
func syncDir(dir string) { atomicfile.SyncDir(dir) }
