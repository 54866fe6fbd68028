package sessionstore

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/talkide/platform/internal/contract"
)

// Validation is what Validate found in a session directory.
type Validation struct {
	ConversationID string
	// Events, Transcript and Reports count the payload records readers
	// accept in each log.
	Events, Transcript, Reports int
	LastSeq                     int64
	// OpenTurn is a turn that started and has not ended (empty when none).
	OpenTurn string
	// AfterCheckpoint is how many events follow the checkpoint (all of
	// them without one): what opening the session reads.
	AfterCheckpoint int64
	// Fence is the highest fencing number in any log.
	Fence uint64
	// Stale counts records appended under a lower fence after a higher one
	// was written: writes of an owner that had lost its lease. Readers
	// ignore them; a correct owner never produces any.
	Stale int
	// TornBytes is what follows the last valid record of the logs: a write
	// cut short by a crash (or still in progress), cut off when the session
	// is next opened for writing.
	TornBytes int64
}

// Validate checks a session directory without changing anything and without
// a lease, reading every log from its start: meta.json is this format; every
// line of every log is a valid record except a torn tail; the accepted events
// have seq 1, 2, 3, …, name no other conversation, never start a turn while
// another is open and never end a turn that is not; transcript records are
// JSON; outbox records are reports with idempotency keys; the checkpoint (if
// intact) and the outbox cursor fall on record boundaries and agree with the
// logs; no log holds a fence above the lease. An error describes the first
// violation; a torn tail and stale records are reported, not errors. It may
// run while an owner writes the session.
func Validate(dir string) (Validation, error) {
	var v Validation
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return v, fmt.Errorf("sessionstore: validate: %w", err)
	}
	var meta Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		return v, fmt.Errorf("sessionstore: validate: bad meta.json: %w", err)
	}
	if meta.Version != FormatVersion {
		return v, fmt.Errorf("sessionstore: validate: format version %d, want %d", meta.Version, FormatVersion)
	}
	if meta.ConversationID != filepath.Base(dir) {
		return v, fmt.Errorf("sessionstore: validate: meta.json names conversation %q in directory %q", meta.ConversationID, filepath.Base(dir))
	}
	v.ConversationID = meta.ConversationID
	fail := func(format string, args ...any) (Validation, error) {
		return v, fmt.Errorf("sessionstore: validate %s: "+format, append([]any{v.ConversationID}, args...)...)
	}
	// The checkpoint and the cursor before the logs, the lease after them:
	// an owner writing meanwhile only moves the logs past what they say.
	ck, haveCk := readCheckpoint(dir)
	cursor := readCursor(filepath.Join(dir, outboxCursor))

	// checkLog validates the log name, each record's payload with check,
	// and returns the boundary after each record by the offset where the
	// record ends (at, when set, says what the boundary holds).
	checkLog := func(name string, check func(payload []byte) error, at func() boundary) (logSummary, map[int64]boundary, error) {
		bounds := map[int64]boundary{0: {}}
		s, err := validateLog(filepath.Join(dir, name), func(end int64, r record) error {
			if r.payload != nil {
				if err := check(r.payload); err != nil {
					return err
				}
			}
			b := boundary{}
			if at != nil {
				b = at()
			}
			bounds[end] = b
			return nil
		})
		if err != nil {
			return s, nil, fmt.Errorf("%s: %w", name, err)
		}
		return s, bounds, nil
	}

	// Events: the state after every accepted record, by the offset where
	// that record ends, so the checkpoint can be compared with it.
	var state EventState
	ev, evBounds, err := checkLog(eventsFile, func(payload []byte) error {
		var e contract.Event
		if err := json.Unmarshal(payload, &e); err != nil {
			return fmt.Errorf("event does not decode: %w", err)
		}
		if e.Seq != state.LastSeq+1 {
			return fmt.Errorf("event seq %d after %d", e.Seq, state.LastSeq)
		}
		if e.ConversationID != "" && e.ConversationID != v.ConversationID {
			return fmt.Errorf("event %d belongs to conversation %q", e.Seq, e.ConversationID)
		}
		if err := e.ValidateParent(); err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		switch e.Kind {
		case "":
			return fmt.Errorf("event %d has no kind", e.Seq)
		case contract.KindTurnStarted:
			if state.OpenTurn != "" {
				return fmt.Errorf("event %d starts turn %s while turn %s is open", e.Seq, e.TurnID, state.OpenTurn)
			}
		case contract.KindTurnFinished, contract.KindTurnFailed:
			if e.TurnID == "" || e.TurnID != state.OpenTurn {
				return fmt.Errorf("event %d ends turn %q, but the open turn is %q", e.Seq, e.TurnID, state.OpenTurn)
			}
		}
		state.apply(&e)
		v.Events++
		return nil
	}, func() boundary { return boundary{lastSeq: state.LastSeq} })
	if err != nil {
		return fail("%w", err)
	}
	v.LastSeq, v.OpenTurn = state.LastSeq, state.OpenTurn

	tr, trBounds, err := checkLog(transcriptFile, func(payload []byte) error {
		if !json.Valid(payload) {
			return errors.New("transcript record is not JSON")
		}
		v.Transcript++
		return nil
	}, nil)
	if err != nil {
		return fail("%w", err)
	}

	ob, obBounds, err := checkLog(outboxFile, func(payload []byte) error {
		var rep contract.Report
		if err := json.Unmarshal(payload, &rep); err != nil {
			return fmt.Errorf("report does not decode: %w", err)
		}
		if rep.IdempotencyKey == "" {
			return errors.New("report without an idempotency key")
		}
		v.Reports++
		return nil
	}, nil)
	if err != nil {
		return fail("%w", err)
	}

	for _, l := range []logSummary{ev, tr, ob} {
		v.Fence = max(v.Fence, l.fence)
		v.Stale += l.stale
		v.TornBytes += l.torn
	}

	if _, ok := obBounds[cursor]; !ok {
		return fail("outbox cursor %d is not the end of a record", cursor)
	}
	v.AfterCheckpoint = v.LastSeq
	if haveCk {
		for name, p := range map[string]struct {
			at     logPoint
			bounds map[int64]boundary
		}{eventsFile: {ck.Events, evBounds}, transcriptFile: {ck.Transcript, trBounds}, outboxFile: {ck.Outbox, obBounds}} {
			if _, ok := p.bounds[p.at.Size]; !ok {
				return fail("checkpoint: %s offset %d is not the end of a record", name, p.at.Size)
			}
		}
		if got := evBounds[ck.Events.Size].lastSeq; got != ck.State.LastSeq {
			return fail("checkpoint says last seq %d at events offset %d, the log says %d", ck.State.LastSeq, ck.Events.Size, got)
		}
		v.AfterCheckpoint = v.LastSeq - ck.State.LastSeq
	}
	lease, _, err := currentLease(filepath.Join(dir, leaseDir))
	if err != nil {
		return fail("lease: %w", err)
	}
	if v.Fence > lease {
		return fail("logs hold fence %d, above the lease's %d", v.Fence, lease)
	}
	return v, nil
}

// boundary is the state at the end of a record.
type boundary struct{ lastSeq int64 }

// logSummary is what validateLog found besides the records.
type logSummary struct {
	fence uint64
	stale int
	torn  int64
}

// validateLog reads a whole log, calling fn with the end offset of every
// record readers accept. A missing log is empty.
func validateLog(path string, fn func(end int64, r record) error) (logSummary, error) {
	var s logSummary
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	off, badAt := int64(0), int64(-1)
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, fmt.Errorf("offset %d: %w", off, err)
		}
		rec, ok, err := decodeAt(line, off, &badAt)
		if err != nil {
			return s, err
		}
		if !ok {
			off += int64(len(line))
			continue
		}
		off += int64(len(line))
		if rec.fence < s.fence {
			s.stale++
			continue
		}
		s.fence = rec.fence
		if err := fn(off, rec); err != nil {
			return s, fmt.Errorf("record ending at offset %d: %w", off, err)
		}
	}
	st, err := f.Stat()
	if err != nil {
		return s, err
	}
	s.torn = st.Size() - endOf(off, badAt)
	return s, nil
}
