package sessionstore

import (
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"

	"github.com/talkide/platform/internal/atomicfile"
)

// checkpoint records where the logs stood when everything was durable, and
// the state derived from them, so that opening a session reads only what
// came after it. It is a cache: a missing, corrupt or stale checkpoint is
// ignored and the logs are read from the start.
type checkpoint struct {
	Version         int          `json:"version"`
	Events          logPoint     `json:"events"`
	Transcript      logPoint     `json:"transcript"`
	Outbox          logPoint     `json:"outbox"`
	State           EventState   `json:"state"`
	Index           []indexEntry `json:"index"`
	Compaction      int64        `json:"compaction"`
	CompactionFence uint64       `json:"compaction_fence"`
	Transcripts     int          `json:"transcripts"`
}

// logPoint is a log's size and the fence in force at that point.
type logPoint struct {
	Size  int64  `json:"size"`
	Fence uint64 `json:"fence"`
}

const checkpointVersion = 1

// writeCheckpointLocked writes the checkpoint; mu is held and every log is
// durable up to its size.
func (s *Session) writeCheckpointLocked() error {
	ck := checkpoint{
		Version:         checkpointVersion,
		Events:          logPoint{s.events.size, s.events.maxFence},
		Transcript:      logPoint{s.transcript.size, s.transcript.maxFence},
		Outbox:          logPoint{s.outbox.size, s.outbox.maxFence},
		State:           s.state,
		Index:           s.index,
		Compaction:      s.compaction,
		CompactionFence: s.compactionFence,
		Transcripts:     s.transcripts,
	}
	b, err := json.Marshal(ck)
	if err != nil {
		return err
	}
	// The checksum line goes first so a reader can check the rest.
	sum := crc32.Checksum(b, castagnoli)
	data := append([]byte(strconv.FormatUint(uint64(sum), 10)+"\n"), b...)
	return atomicfile.WriteFile(filepath.Join(s.dir, checkpointFile), data, 0o600)
}

// readCheckpoint returns the checkpoint when it is intact and still fits the
// logs (they may have been truncated since, e.g. by a restore).
func readCheckpoint(dir string) (checkpoint, bool) {
	var ck checkpoint
	data, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		return ck, false
	}
	head, body, ok := cutLine(data)
	if !ok {
		return ck, false
	}
	sum, err := strconv.ParseUint(string(head), 10, 32)
	if err != nil || uint32(sum) != crc32.Checksum(body, castagnoli) {
		return ck, false
	}
	if err := json.Unmarshal(body, &ck); err != nil || ck.Version != checkpointVersion {
		return checkpoint{}, false
	}
	for name, p := range map[string]logPoint{eventsFile: ck.Events, transcriptFile: ck.Transcript, outboxFile: ck.Outbox} {
		st, err := os.Stat(filepath.Join(dir, name))
		size := int64(0)
		if err == nil {
			size = st.Size()
		}
		if p.Size > size {
			return checkpoint{}, false
		}
	}
	return ck, true
}

func cutLine(b []byte) (head, rest []byte, ok bool) {
	for i, c := range b {
		if c == '\n' {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}
