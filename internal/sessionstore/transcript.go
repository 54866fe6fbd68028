package sessionstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
)

// markerCompaction precedes a transcript record that replaces everything
// before it (a compaction summary): the model is sent the transcript from
// the last such marker on.
const markerCompaction = "compaction"

// AppendTranscript appends one transcript record (a JSON value). With
// compaction, the record starts a new context: Transcript returns it and
// what follows, and earlier records stay on disk as history.
func (s *Session) AppendTranscript(rec json.RawMessage, compaction bool) error {
	var out bytes.Buffer
	if err := json.Compact(&out, rec); err != nil || out.Len() == 0 {
		return errors.New("sessionstore: transcript record is not valid JSON")
	}
	b := out.Bytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if compaction {
		off, err := s.transcript.append(encodeRecord(s.lease.fence, nil, markerCompaction))
		if err != nil {
			return fmt.Errorf("sessionstore: append transcript: %w", err)
		}
		s.compaction, s.compactionFence, s.transcripts = off, s.lease.fence, 0
	}
	if _, err := s.transcript.append(encodeRecord(s.lease.fence, b, "")); err != nil {
		return fmt.Errorf("sessionstore: append transcript: %w", err)
	}
	s.transcripts++
	return nil
}

// Transcript returns the transcript records from the last compaction point
// on, in order: what the model is sent.
func (s *Session) Transcript() ([]json.RawMessage, error) {
	s.mu.Lock()
	from, to, fence := s.compaction, s.transcript.size, s.compactionFence
	n := s.transcripts
	s.mu.Unlock()
	out := make([]json.RawMessage, 0, n)
	err := readRange(filepath.Join(s.dir, transcriptFile), from, to, fence, func(_ int64, r record) error {
		if r.marker == markerCompaction {
			out = out[:0]
		}
		if r.payload != nil {
			out = append(out, json.RawMessage(append([]byte(nil), r.payload...)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sessionstore: read transcript: %w", err)
	}
	return out, nil
}
