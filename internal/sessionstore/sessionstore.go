// Package sessionstore owns the durable state of worker sessions under
// $CLAUDE_CONFIG_DIR/projects/{conversationId}/: metadata, the event log
// (the SSE sequence) and the harness's transcript.
//
// Files are JSON lines, appended with one write per record. A torn last line
// (a crash mid-write) is detected when the session opens and cut off. See
// docs/sessions.md for the format.
package sessionstore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// FormatVersion is written into meta.json; a session written by a newer
// format is refused rather than misread.
const FormatVersion = 1

// File names inside a session directory.
const (
	metaFile       = "meta.json"
	eventsFile     = "events.jsonl"
	transcriptFile = "transcript.jsonl"
)

// maxRecord bounds one JSON line on read; a longer line is corruption.
const maxRecord = 16 << 20

// ErrNotFound is returned by Load for a session that does not exist.
var ErrNotFound = errors.New("session not found")

// Store is the projects directory.
type Store struct {
	root string
}

// New returns the store rooted at dir (created if missing), normally
// $CLAUDE_CONFIG_DIR/projects.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	return &Store{root: dir}, nil
}

// Root is the projects directory.
func (s *Store) Root() string { return s.root }

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
	dir  string
	meta Meta

	mu sync.Mutex
	// guarded by mu
	events     *os.File
	transcript *os.File
	lastSeq    int64
	eventsSize int64   // bytes of complete records in events.jsonl
	index      []int64 // index[k] is the offset of event k*indexStride+1
}

// indexStride is how many events one index entry covers: replay after any
// seq reads at most this many records it does not need, and the index costs
// 8 bytes per stride.
const indexStride = 128

// Create opens the session of id, creating it with meta if it does not exist.
// created tells which happened.
func (s *Store) Create(id string, meta Meta) (sess *Session, created bool, err error) {
	if err := contract.ValidateConversationID(id); err != nil {
		return nil, false, err
	}
	dir := filepath.Join(s.root, id)
	sess, err = s.Load(id)
	if err == nil {
		return sess, false, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("sessionstore: %w", err)
	}
	meta.Version = FormatVersion
	meta.ConversationID = id
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, false, err
	}
	if err := writeFileAtomic(filepath.Join(dir, metaFile), append(b, '\n')); err != nil {
		return nil, false, err
	}
	sess, err = s.Load(id)
	return sess, err == nil, err
}

// Load opens an existing session, cutting off a torn tail of its logs.
func (s *Store) Load(id string) (*Session, error) {
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
		return nil, fmt.Errorf("sessionstore: %s: bad meta: %w", id, err)
	}
	if meta.Version > FormatVersion {
		return nil, fmt.Errorf("sessionstore: %s: format version %d is newer than %d", id, meta.Version, FormatVersion)
	}
	sess := &Session{dir: dir, meta: meta}
	var last int64
	sess.events, sess.eventsSize, err = openLog(filepath.Join(dir, eventsFile), func(off int64, line []byte) error {
		seq, err := eventSeq(line)
		if err != nil {
			return err
		}
		if seq != last+1 {
			return fmt.Errorf("sequence %d after %d", seq, last)
		}
		if (seq-1)%indexStride == 0 {
			sess.index = append(sess.index, off)
		}
		last = seq
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %s: %w", id, err)
	}
	sess.lastSeq = last
	sess.transcript, _, err = openLog(filepath.Join(dir, transcriptFile), func(_ int64, line []byte) error {
		if !json.Valid(line) {
			return errors.New("invalid JSON")
		}
		return nil
	})
	if err != nil {
		sess.events.Close()
		return nil, fmt.Errorf("sessionstore: %s: %w", id, err)
	}
	return sess, nil
}

// openLog opens (creating) an append-only JSON-lines file, checks every
// record with check, and truncates the file after the last good record: a
// crash can leave a torn last line, never a bad line in the middle, so a bad
// record followed by good ones is an error.
func openLog(path string, check func(offset int64, line []byte) error) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var good int64
	var badAt int64 = -1
	for {
		line, err := readLine(r)
		if errors.Is(err, io.EOF) {
			if len(line) > 0 && badAt < 0 {
				badAt = good // unterminated last line: torn
			}
			break
		}
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		if badAt >= 0 {
			f.Close()
			return nil, 0, fmt.Errorf("%s: corrupt record at offset %d followed by more records", filepath.Base(path), badAt)
		}
		if cerr := check(good, bytes.TrimSuffix(line, []byte("\n"))); cerr != nil {
			badAt = good
			continue
		}
		good += int64(len(line))
	}
	if badAt >= 0 {
		if err := f.Truncate(badAt); err != nil {
			f.Close()
			return nil, 0, err
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, good, nil
}

// eventSeq reads the seq of an event line. Events are written with seq as
// their first field, so the fast path parses digits after `{"seq":` without
// decoding the event; anything else falls back to JSON.
func eventSeq(line []byte) (int64, error) {
	const prefix = `{"seq":`
	if bytes.HasPrefix(line, []byte(prefix)) {
		var n int64
		i := len(prefix)
		for ; i < len(line) && i < len(prefix)+18 && line[i] >= '0' && line[i] <= '9'; i++ {
			n = n*10 + int64(line[i]-'0')
		}
		if i > len(prefix) && i < len(line) && (line[i] == ',' || line[i] == '}') && json.Valid(line) {
			return n, nil
		}
	}
	var ev struct {
		Seq int64 `json:"seq"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return 0, err
	}
	return ev.Seq, nil
}

// readLine returns one line including its '\n'; at EOF it returns the
// unterminated rest (maybe empty) and io.EOF.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxRecord {
			return nil, fmt.Errorf("record longer than %d bytes", maxRecord)
		}
		if err == nil {
			return line, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

// Meta returns the session's metadata.
func (s *Session) Meta() Meta { return s.meta }

// Dir is the session directory; a harness may keep its own files there.
func (s *Session) Dir() string { return s.dir }

// LastSeq is the sequence number of the newest event (0 when none).
func (s *Session) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq
}

// AppendEvent gives ev the next sequence number and appends it to the log.
// The line is written with one write call, so a concurrent reader sees either
// all of it or an unterminated tail, which it ignores.
func (s *Session) AppendEvent(ev *contract.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		return os.ErrClosed
	}
	ev.Seq = s.lastSeq + 1
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := s.events.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("sessionstore: append event: %w", err)
	}
	if (ev.Seq-1)%indexStride == 0 {
		s.index = append(s.index, s.eventsSize)
	}
	s.eventsSize += int64(len(b) + 1)
	s.lastSeq = ev.Seq
	return nil
}

// ReadEvents calls fn for every event with seq > after, in order, up to the
// newest complete one. It stops early with fn's error.
func (s *Session) ReadEvents(after int64, fn func(contract.Event) error) error {
	f, err := os.Open(filepath.Join(s.dir, eventsFile))
	if err != nil {
		return fmt.Errorf("sessionstore: %w", err)
	}
	defer f.Close()
	s.mu.Lock()
	var start int64
	if k := after / indexStride; after > 0 && int(k) < len(s.index) {
		start = s.index[k]
	}
	s.mu.Unlock()
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("sessionstore: %w", err)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(r)
		if errors.Is(err, io.EOF) {
			return nil // an unterminated tail is a write in progress
		}
		if err != nil {
			return err
		}
		seq, err := eventSeq(line[:len(line)-1])
		if err != nil {
			return fmt.Errorf("sessionstore: corrupt event log: %w", err)
		}
		if seq <= after {
			continue
		}
		var ev contract.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("sessionstore: corrupt event log: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// AppendTranscript appends one transcript record (a JSON value).
func (s *Session) AppendTranscript(rec json.RawMessage) error {
	if !json.Valid(rec) {
		return errors.New("sessionstore: transcript record is not valid JSON")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, rec); err != nil {
		return err
	}
	b.WriteByte('\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.transcript == nil {
		return os.ErrClosed
	}
	if _, err := s.transcript.Write(b.Bytes()); err != nil {
		return fmt.Errorf("sessionstore: append transcript: %w", err)
	}
	return nil
}

// Transcript returns every transcript record in order.
func (s *Session) Transcript() ([]json.RawMessage, error) {
	f, err := os.Open(filepath.Join(s.dir, transcriptFile))
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var out []json.RawMessage
	for {
		line, err := readLine(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, json.RawMessage(bytes.TrimSuffix(line, []byte("\n"))))
	}
}

// Sync flushes both logs to stable storage.
func (s *Session) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.events != nil {
		errs = append(errs, s.events.Sync())
	}
	if s.transcript != nil {
		errs = append(errs, s.transcript.Sync())
	}
	return errors.Join(errs...)
}

// Close syncs and closes the session's files.
func (s *Session) Close() error {
	err := s.Sync()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil {
		err = errors.Join(err, s.events.Close())
		s.events = nil
	}
	if s.transcript != nil {
		err = errors.Join(err, s.transcript.Close())
		s.transcript = nil
	}
	return err
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
