package sessionstore

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/talkide/platform/internal/contract"
)

// AllReports returns every report the outbox holds, acknowledged or not, in
// the order they were written: for checks and tools that account for every
// report (the reporter sends PendingReports). Like ReadEvents it returns the
// durable ones, or everything on a session opened with Inspect.
func (s *Session) AllReports() ([]contract.Report, error) {
	s.mu.Lock()
	to := s.outbox.durable
	if s.readOnly {
		to = s.outbox.size
	}
	s.mu.Unlock()
	if to == 0 {
		return nil, nil
	}
	var out []contract.Report
	err := readRange(filepath.Join(s.dir, outboxFile), 0, to, 0, func(_ int64, r record) error {
		if r.payload == nil {
			return nil
		}
		var rep contract.Report
		if err := json.Unmarshal(r.payload, &rep); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		out = append(out, rep)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sessionstore: read outbox: %w", err)
	}
	return out, nil
}
