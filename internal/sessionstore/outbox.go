package sessionstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/contract"
)

// errStop ends a read early without an error.
var errStop = errors.New("stop")

// AppendReport writes a report for the control-plane to the session's
// outbox. It is durable after the next Sync; the reporter sends it from
// there and acknowledges it with AckReports, so a crash or a control-plane
// outage loses nothing.
func (s *Session) AppendReport(r contract.Report) (end int64, err error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return 0, err
	}
	if _, err := s.outbox.append(encodeRecord(s.lease.fence, payload, "")); err != nil {
		return 0, fmt.Errorf("sessionstore: append report: %w", err)
	}
	return s.outbox.size, nil
}

// PendingReport is an outbox entry not yet acknowledged; End is the offset
// to acknowledge it with.
type PendingReport struct {
	Report contract.Report
	End    int64
}

// PendingReports returns the durable reports after the acknowledged point.
func (s *Session) PendingReports() ([]PendingReport, error) {
	s.mu.Lock()
	from, to := s.ackedTo, s.outbox.durable
	if s.readOnly {
		to = s.outbox.size
	}
	s.mu.Unlock()
	if from >= to {
		return nil, nil
	}
	var out []PendingReport
	err := readRange(filepath.Join(s.dir, outboxFile), from, to, 0, func(off int64, r record) error {
		if r.payload == nil {
			return nil
		}
		var rep contract.Report
		if err := json.Unmarshal(r.payload, &rep); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		// The line's end: its offset plus its encoded length.
		out = append(out, PendingReport{Report: rep, End: off + int64(len(encodeRecord(r.fence, r.payload, "")))})
		return nil
	})
	return out, err
}

// AckReports records that every report up to end has been acknowledged. The
// cursor is written atomically; acknowledging less than before is a no-op.
func (s *Session) AckReports(end int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.readOnly {
		return os.ErrClosed
	}
	if end <= s.ackedTo {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, outboxCursor), []byte(strconv.FormatInt(end, 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("sessionstore: ack reports: %w", err)
	}
	s.ackedTo = end
	return nil
}

func readCursor(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// WithPendingReports lists the sessions whose outbox holds reports not yet
// acknowledged, without opening them: it reads only each outbox's tail after
// its cursor.
func (s *Store) WithPendingReports() ([]string, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() || contract.ValidateConversationID(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(s.root, e.Name())
		st, err := os.Stat(filepath.Join(dir, outboxFile))
		if err != nil {
			continue
		}
		from := readCursor(filepath.Join(dir, outboxCursor))
		if st.Size() <= from {
			continue
		}
		found := false
		_ = readRange(filepath.Join(dir, outboxFile), from, st.Size(), 0, func(_ int64, r record) error {
			if r.payload != nil {
				found = true
				return errStop
			}
			return nil
		})
		if found {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
