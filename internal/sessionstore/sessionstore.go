// Package sessionstore owns the durable state of worker sessions under
// $CLAUDE_CONFIG_DIR/projects/{conversationId}/: metadata, the event log (the
// SSE sequence), the harness's transcript, the report outbox, a checkpoint
// and the lease that makes one worker the owner.
//
// Every log line is a JSON record with a CRC-32C and the fencing number of
// the lease it was written under. A torn or corrupt tail (a crash mid-write)
// is cut off when the session opens; a checkpoint makes opening cost the
// same however long the session has grown. See docs/sessions.md.
package sessionstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
)

// FormatVersion is written into meta.json; a session written in another
// format is refused rather than misread.
const FormatVersion = 2

// File names inside a session directory.
const (
	metaFile       = "meta.json"
	eventsFile     = "events.jsonl"
	transcriptFile = "transcript.jsonl"
	outboxFile     = "outbox.jsonl"
	outboxCursor   = "outbox.cursor"
	checkpointFile = "checkpoint.json"
)

// ErrNotFound is returned by Load for a session that does not exist.
var ErrNotFound = errors.New("session not found")

// Options configure a Store.
type Options struct {
	// Holder names this process in leases (e.g. the pod name); required to
	// open sessions for writing.
	Holder string
	// Addr is the base URL this process's peers reach it at (e.g.
	// http://10.1.2.3:8080), written into the leases it takes so that a
	// peer asked about one of its sessions can forward the command; empty:
	// none advertised.
	Addr string
	// LeaseTTL is how long a lease lasts without renewal; default
	// DefaultLeaseTTL. Owners renew at a third of it.
	LeaseTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// CheckpointEvery is how many events may follow the last checkpoint
	// before Sync writes a new one; default 512.
	CheckpointEvery int
	// Heartbeat, among replicas, is this process's beats in the registry
	// its peers read: its sessions are written only while they allow it
	// (see Heartbeat). nil: a lease's expiry alone counts.
	Heartbeat *Heartbeat
	// PeerBeatEnds, among replicas, returns when a holder's beats stop
	// covering its leases, zero when it keeps none this process can read
	// (replicaset.Registry.BeatEnds): a lease whose holder's beats ended
	// is taken over then, not when the lease expires.
	PeerBeatEnds func(holder string) time.Time
	// Fsync makes one log file durable in Sync (and so in Close); nil means
	// (*os.File).Sync. Tests set it to make the disk fail.
	Fsync func(*os.File) error
}

// Store is the projects directory.
type Store struct {
	root string
	opts Options
}

// New returns the store rooted at dir (created if missing), normally
// $CLAUDE_CONFIG_DIR/projects.
func New(dir string, opts *Options) (*Store, error) {
	o := defaults.Copy(opts)
	defaults.IfNotPositive(&o.LeaseTTL, DefaultLeaseTTL)
	defaults.Clock(&o.Now)
	defaults.IfNotPositive(&o.CheckpointEvery, 512)
	if o.Fsync == nil {
		o.Fsync = (*os.File).Sync
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	return &Store{root: dir, opts: o}, nil
}

// Root is the projects directory.
func (s *Store) Root() string { return s.root }

// LeaseTTL is the lease lifetime sessions of this store get.
func (s *Store) LeaseTTL() time.Duration { return s.opts.LeaseTTL }

// Meta describes a session.
type Meta struct {
	Version        int       `json:"version"`
	ConversationID string    `json:"conversation_id"`
	UserID         string    `json:"user_id,omitempty"`
	Harness        string    `json:"harness"`
	CreatedAt      time.Time `json:"created_at"`
}

// Session is one open session directory. Its methods are safe for concurrent
// use.
type Session struct {
	store    *Store
	dir      string
	meta     Meta
	readOnly bool

	mu sync.Mutex
	// guarded by mu
	lease           *lease
	events          *logFile
	transcript      *logFile
	outbox          *logFile
	state           EventState
	durableSeq      int64 // last event seq known to be on stable storage
	index           []indexEntry
	compaction      int64 // transcript offset records are read from
	compactionFence uint64
	transcripts     int // transcript records since compaction
	sinceCkpt       int // events appended since the last checkpoint
	syncing         bool
	syncDone        *sync.Cond
	closed          bool
	ackedTo         int64 // outbox offset of the first unacknowledged report
}

// indexEntry locates every indexStride-th event: its offset and the fence
// in force there, so a replay can start reading mid-file.
type indexEntry struct {
	Off   int64  `json:"o"`
	Fence uint64 `json:"f"`
}

// indexStride is how many events one index entry covers: replay after any
// seq reads at most this many records it does not need.
const indexStride = 128

// Create opens the session of id for writing, creating it with meta if it
// does not exist; created tells which happened. It takes the session's lease.
func (s *Store) Create(id string, meta Meta) (sess *Session, created bool, err error) {
	if err := contract.ValidateConversationID(id); err != nil {
		return nil, false, err
	}
	dir := filepath.Join(s.root, id)
	if _, err := os.Stat(filepath.Join(dir, metaFile)); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, false, fmt.Errorf("sessionstore: %w", err)
		}
		meta.Version = FormatVersion
		meta.ConversationID = id
		b, err := json.MarshalIndent(meta, "", "  ")
		if err != nil {
			return nil, false, err
		}
		// Two workers creating at once write the same kind of content; the
		// rename makes one of them win whole.
		if err := atomicfile.WriteFile(filepath.Join(dir, metaFile), append(b, '\n'), 0o600); err != nil {
			return nil, false, fmt.Errorf("sessionstore: %w", err)
		}
		created = true
	}
	sess, err = s.open(id, false)
	return sess, created && err == nil, err
}

// Load opens an existing session for writing, taking its lease.
func (s *Store) Load(id string) (*Session, error) { return s.open(id, false) }

// Inspect opens an existing session read-only, without a lease and without
// repairing anything: for tools and checks that must not disturb an owner.
func (s *Store) Inspect(id string) (*Session, error) { return s.open(id, true) }

func (s *Store) open(id string, readOnly bool) (*Session, error) {
	if err := contract.ValidateConversationID(id); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.root, id)
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	var meta Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("sessionstore: %s: bad meta.json: %w", id, err)
	}
	if meta.Version != FormatVersion {
		return nil, fmt.Errorf("sessionstore: %s: format version %d, this build reads %d", id, meta.Version, FormatVersion)
	}
	sess := &Session{store: s, dir: dir, meta: meta, readOnly: readOnly}
	sess.syncDone = sync.NewCond(&sess.mu)
	if !readOnly {
		if s.opts.Holder == "" {
			return nil, errors.New("sessionstore: opening for writing needs Options.Holder")
		}
		if sess.lease, err = s.acquireLease(dir, s.opts.Holder, s.opts.Addr, s.opts.Now()); err != nil {
			return nil, err
		}
	}
	if err := sess.load(); err != nil {
		sess.closeFiles()
		if sess.lease != nil {
			sess.lease.release()
		}
		return nil, fmt.Errorf("sessionstore: %s: %w", id, err)
	}
	if !readOnly {
		// Mark every log with the new fence before anything else is
		// written: whatever an earlier owner appends after this line is
		// ignored by every reader.
		marker := encodeRecord(sess.lease.fence, nil, "owner "+s.opts.Holder)
		for _, l := range []*logFile{sess.events, sess.transcript, sess.outbox} {
			if _, err := l.append(marker); err != nil {
				sess.closeFiles()
				sess.lease.release()
				return nil, fmt.Errorf("sessionstore: %s: %w", id, err)
			}
			l.maxFence = sess.lease.fence
		}
	}
	return sess, nil
}

// load reads the checkpoint and the logs after it.
func (s *Session) load() error {
	ck, ok := readCheckpoint(s.dir)
	var err error
	if ok {
		s.state = ck.State
		s.index = ck.Index
		s.compaction, s.compactionFence = ck.Compaction, ck.CompactionFence
		s.transcripts = ck.Transcripts
	}
	writable := !s.readOnly
	evFrom, evFence := int64(0), uint64(0)
	trFrom, trFence := int64(0), uint64(0)
	obFrom, obFence := int64(0), uint64(0)
	if ok {
		evFrom, evFence = ck.Events.Size, ck.Events.Fence
		trFrom, trFence = ck.Transcript.Size, ck.Transcript.Fence
		obFrom, obFence = ck.Outbox.Size, ck.Outbox.Fence
	}
	s.events, err = openLogFile(filepath.Join(s.dir, eventsFile), evFrom, evFence, writable, func(off int64, r record) error {
		if r.payload == nil {
			return nil
		}
		var ev contract.Event
		if err := json.Unmarshal(r.payload, &ev); err != nil {
			return err
		}
		if ev.Seq != s.state.LastSeq+1 {
			return fmt.Errorf("%w: event seq %d after %d", ErrCorrupt, ev.Seq, s.state.LastSeq)
		}
		if (ev.Seq-1)%indexStride == 0 {
			s.index = append(s.index, indexEntry{Off: off, Fence: r.fence})
		}
		s.state.apply(&ev)
		// Events after the checkpoint count towards the next one, or a
		// worker that crashes every few hundred events would never write
		// one and each reopen would scan more.
		s.sinceCkpt++
		return nil
	})
	if err != nil {
		return err
	}
	s.durableSeq = s.state.LastSeq
	s.transcript, err = openLogFile(filepath.Join(s.dir, transcriptFile), trFrom, trFence, writable, func(off int64, r record) error {
		if r.marker == markerCompaction {
			s.compaction, s.compactionFence, s.transcripts = off, r.fence, 0
		} else if r.payload != nil {
			s.transcripts++
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.outbox, err = openLogFile(filepath.Join(s.dir, outboxFile), obFrom, obFence, writable, nil)
	if err != nil {
		return err
	}
	s.ackedTo = readCursor(filepath.Join(s.dir, outboxCursor))
	return nil
}

// Meta returns the session's metadata.
func (s *Session) Meta() Meta { return s.meta }

// Dir is the session directory; a harness may keep its own files there.
func (s *Session) Dir() string { return s.dir }

// Fence is the fencing number this session writes under (0 read-only).
func (s *Session) Fence() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return 0
	}
	return s.lease.fence
}

// writable checks, under mu, that this session may append now.
func (s *Session) writable() error {
	if s.closed || s.readOnly {
		return os.ErrClosed
	}
	if !s.lease.valid(s.store.opts.Now()) {
		return ErrFenced
	}
	return nil
}

// RenewLease extends the session's lease; the owner calls it about every
// third of the TTL. ErrFenced means the lease is lost: stop using the
// session.
func (s *Session) RenewLease() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.readOnly {
		return os.ErrClosed
	}
	if err := s.lease.renew(s.store.opts.LeaseTTL, s.store.opts.Now()); err != nil {
		return err
	}
	return nil
}

// LeaseExpires is when the session's lease ends unless it is renewed.
func (s *Session) LeaseExpires() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return time.Time{}
	}
	return s.lease.expires
}

// RenewLeaseIfDue renews the lease unless it was taken or renewed less
// than a sixth of a lease ago, by the store's clock: a caller that renews
// every third of a lease skips the sessions opened since its last pass.
func (s *Session) RenewLeaseIfDue() error {
	ttl := s.store.opts.LeaseTTL
	if s.LeaseExpires().Sub(s.store.opts.Now()) >= ttl*5/6 {
		return nil
	}
	return s.RenewLease()
}

// Sync makes everything appended so far durable. Concurrent callers share
// one fsync per file (group commit): a caller that finds a sync running
// waits for it and then, if its own appends are still not covered, leads the
// next one.
func (s *Session) Sync() error {
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return nil
		}
		if s.events.durable == s.events.size && s.transcript.durable == s.transcript.size && s.outbox.durable == s.outbox.size {
			s.mu.Unlock()
			return nil
		}
		if !s.syncing {
			break
		}
		s.syncDone.Wait()
	}
	s.syncing = true
	targets := [3]int64{s.events.size, s.transcript.size, s.outbox.size}
	files := [3]*logFile{s.events, s.transcript, s.outbox}
	seq := s.state.LastSeq
	s.mu.Unlock()

	var errs []error
	for i, l := range files {
		if l.durable < targets[i] {
			errs = append(errs, s.store.opts.Fsync(l.f))
		}
	}
	err := errors.Join(errs...)

	s.mu.Lock()
	s.syncing = false
	if err == nil {
		for i, l := range files {
			l.durable = max(l.durable, targets[i])
		}
		s.durableSeq = max(s.durableSeq, seq)
		if s.sinceCkpt >= s.store.opts.CheckpointEvery && s.events.durable == s.events.size &&
			s.transcript.durable == s.transcript.size && s.outbox.durable == s.outbox.size {
			if cerr := s.writeCheckpointLocked(); cerr == nil {
				s.sinceCkpt = 0
			}
		}
	}
	s.syncDone.Broadcast()
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sessionstore: sync: %w", err)
	}
	return nil
}

// Rest closes the session's log files while everything in them is durable
// and no sync runs: an idle session then holds no descriptor (thousands
// of idle conversations on a worker would otherwise hold three each). The
// next append reopens what it writes to; the lease stays held. It reports
// whether every file is closed now.
func (s *Session) Rest() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.readOnly || s.syncing {
		return false
	}
	rested := true
	for _, l := range []*logFile{s.events, s.transcript, s.outbox} {
		rested = l.rest() && rested
	}
	return rested
}

// Close syncs, writes a checkpoint, releases the lease and closes the files.
func (s *Session) Close() error {
	if s.readOnly {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.closed = true
		s.closeFiles()
		return nil
	}
	err := s.Sync()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return err
	}
	if err == nil && s.lease.valid(s.store.opts.Now()) {
		err = s.writeCheckpointLocked()
	}
	s.closed = true
	s.closeFiles()
	return errors.Join(err, s.lease.release())
}

func (s *Session) closeFiles() {
	for _, l := range []*logFile{s.events, s.transcript, s.outbox} {
		if l != nil && l.f != nil {
			l.f.Close()
			l.f = nil
		}
	}
}
