package sessionstore

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/talkide/platform/internal/contract"
)

// recentMessages is how many client message ids a session remembers for
// idempotent sends: a retry arrives within minutes, so the last 1024 cover
// it while an idle session stays small.
const recentMessages = 1024

// EventState is what the event log says about a session, kept up to date on
// every append and saved in checkpoints, so that opening a session does not
// read its history.
type EventState struct {
	LastSeq int64 `json:"last_seq"`
	Turns   int   `json:"turns"`
	// OpenTurn is a turn that started and has not ended.
	OpenTurn string `json:"open_turn,omitempty"`
	// Recent are the latest user messages, oldest first.
	Recent []RecentMessage `json:"recent,omitempty"`
}

// RecentMessage is one accepted user message.
type RecentMessage struct {
	ClientMessageID string `json:"id"`
	TurnID          string `json:"turn"`
	Seq             int64  `json:"seq"`
}

func (st *EventState) apply(ev *contract.Event) {
	st.LastSeq = ev.Seq
	switch ev.Kind {
	case contract.KindUserMessage:
		if len(st.Recent) >= recentMessages {
			st.Recent = append(st.Recent[:0:0], st.Recent[1:]...)
		}
		st.Recent = append(st.Recent, RecentMessage{ClientMessageID: ev.ClientMessageID, TurnID: ev.TurnID, Seq: ev.Seq})
	case contract.KindTurnStarted:
		st.Turns++
		st.OpenTurn = ev.TurnID
	case contract.KindTurnFinished, contract.KindTurnFailed:
		if ev.TurnID == st.OpenTurn {
			st.OpenTurn = ""
		}
	}
}

// State returns the session's event state. Recent is a copy.
func (s *Session) State() EventState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.Recent = append([]RecentMessage(nil), s.state.Recent...)
	return st
}

// LastSeq is the sequence number of the newest event appended (0 when none).
func (s *Session) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.LastSeq
}

// DurableSeq is the newest event known to be on stable storage: what a
// client may be shown.
func (s *Session) DurableSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durableSeq
}

// AppendEvent gives ev the next sequence number and appends it with one
// write. It is durable after the next Sync; until then a crash may lose it,
// so it must not be shown to a client before (see DurableSeq).
func (s *Session) AppendEvent(ev *contract.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	ev.Seq = s.state.LastSeq + 1
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	off, err := s.events.append(encodeRecord(s.lease.fence, payload, ""))
	if err != nil {
		return fmt.Errorf("sessionstore: append event: %w", err)
	}
	if (ev.Seq-1)%indexStride == 0 {
		s.index = append(s.index, indexEntry{Off: off, Fence: s.lease.fence})
	}
	s.state.apply(ev)
	s.sinceCkpt++
	return nil
}

// ReadEvents calls fn for every durable event with seq > after, in order. It
// starts from the index entry before after+1, so its cost depends on how
// many events it returns, not on the length of the log.
func (s *Session) ReadEvents(after int64, fn func(contract.Event) error) error {
	s.mu.Lock()
	var start indexEntry
	if k := int(after / indexStride); after > 0 && len(s.index) > 0 {
		// Past the last entry (a caught-up client, or an id beyond the
		// log) the last entry is still the nearest start.
		start = s.index[min(k, len(s.index)-1)]
	}
	end, last := s.events.durable, s.durableSeq
	if s.readOnly {
		end, last = s.events.size, s.state.LastSeq
	}
	s.mu.Unlock()
	if after >= last {
		return nil
	}
	return readRange(filepath.Join(s.dir, eventsFile), start.Off, end, start.Fence, func(_ int64, r record) error {
		if r.payload == nil {
			return nil
		}
		seq, err := eventSeq(r.payload)
		if err != nil {
			return err
		}
		if seq <= after {
			return nil
		}
		if seq > last {
			return errStop
		}
		var ev contract.Event
		if err := json.Unmarshal(r.payload, &ev); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return fn(ev)
	})
}

// eventSeq reads the seq of an event payload without decoding the event:
// events are written with seq as their first field.
func eventSeq(p []byte) (int64, error) {
	const prefix = `{"seq":`
	if len(p) > len(prefix) && string(p[:len(prefix)]) == prefix {
		var n int64
		i := len(prefix)
		for ; i < len(p) && i < len(prefix)+18 && p[i] >= '0' && p[i] <= '9'; i++ {
			n = n*10 + int64(p[i]-'0')
		}
		if i > len(prefix) && i < len(p) && (p[i] == ',' || p[i] == '}') {
			return n, nil
		}
	}
	var ev struct {
		Seq int64 `json:"seq"`
	}
	if err := json.Unmarshal(p, &ev); err != nil {
		return 0, err
	}
	return ev.Seq, nil
}
