package sessionstore

import (
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

// healthySession writes a session with two finished turns, transcript
// records, reports (one acknowledged) and a checkpoint, and returns its
// directory.
func healthySession(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "projects")
	st := newStoreAt(t, dir, "w", nil)
	s := mustCreate(t, st, "c1", Meta{Harness: "native"})
	for _, turn := range []string{"t_1", "t_2"} {
		for _, ev := range []contract.Event{
			{Kind: contract.KindUserMessage, TurnID: turn, ClientMessageID: "m" + turn, Text: "hi"},
			{Kind: contract.KindTurnStarted, TurnID: turn},
			{Kind: contract.KindTextDelta, TurnID: turn, Text: "hello"},
			{Kind: contract.KindTurnFinished, TurnID: turn},
		} {
			ev.ConversationID = "c1"
			if err := s.AppendEvent(&ev); err != nil {
				t.Fatal(err)
			}
		}
		for _, rec := range []string{`{"role":"user","content":[{"type":"text","text":"hi"}]}`, `{"role":"assistant","content":[{"type":"text","text":"hello"}]}`} {
			if err := s.AppendTranscript(json.RawMessage(rec), false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AppendReport(contract.Report{IdempotencyKey: "c1/" + turn, Kind: contract.ReportActivity, ConversationID: "c1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	p, err := s.PendingReports()
	if err != nil || len(p) != 2 {
		t.Fatalf("pending = %v, %v", p, err)
	}
	if err := s.AckReports(p[0].End); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return st, filepath.Join(dir, "c1")
}

func appendRaw(t *testing.T, path string, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func eventRecord(fence uint64, seq int64, kind, turn string) string {
	b, _ := json.Marshal(contract.Event{Seq: seq, Kind: kind, ConversationID: "c1", TurnID: turn, Time: time.Unix(1, 0).UTC()})
	return string(encodeRecord(fence, b, ""))
}

// fenceOf returns the fence the last owner of the session wrote under.
func fenceOf(t *testing.T, dir string) uint64 {
	t.Helper()
	f, _, err := currentLease(filepath.Join(dir, leaseDir))
	if err != nil || f == 0 {
		t.Fatalf("lease: %d, %v", f, err)
	}
	return f
}

func TestValidateHealthySession(t *testing.T) {
	_, dir := healthySession(t)
	got, err := Validate(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Validation{ConversationID: "c1", Events: 8, Transcript: 4, Reports: 2, LastSeq: 8, Fence: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("validation (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		damage func(t *testing.T, dir string)
		want   string // substring of the error; empty: valid
		check  func(t *testing.T, v Validation)
	}{
		"torn tail is reported, not an error": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, eventsFile), `{"c":"0000`)
			},
			check: func(t *testing.T, v Validation) {
				if v.TornBytes != int64(len(`{"c":"0000`)) || v.LastSeq != 8 {
					t.Errorf("torn %d, last seq %d", v.TornBytes, v.LastSeq)
				}
			},
		},
		"stale owner's records are counted and ignored": {
			damage: func(t *testing.T, dir string) {
				f := fenceOf(t, dir)
				appendRaw(t, filepath.Join(dir, eventsFile), string(encodeRecord(f+1, nil, "owner next"))+eventRecord(f, 9, contract.KindNotice, ""))
				os.WriteFile(filepath.Join(dir, leaseDir, leaseName(f+1)), []byte(`{"holder":"next"}`), 0o600)
			},
			check: func(t *testing.T, v Validation) {
				if v.Stale != 1 || v.LastSeq != 8 || v.Fence != 2 {
					t.Errorf("stale %d, last seq %d, fence %d", v.Stale, v.LastSeq, v.Fence)
				}
			},
		},
		"corrupt record before valid ones": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, eventsFile), "garbage\n"+eventRecord(fenceOf(t, dir), 9, contract.KindNotice, ""))
			},
			want: "followed by a valid one",
		},
		"seq gap": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, eventsFile), eventRecord(fenceOf(t, dir), 10, contract.KindNotice, ""))
			},
			want: "event seq 10 after 8",
		},
		"two turns at once": {
			damage: func(t *testing.T, dir string) {
				f := fenceOf(t, dir)
				appendRaw(t, filepath.Join(dir, eventsFile), eventRecord(f, 9, contract.KindTurnStarted, "t_3")+eventRecord(f, 10, contract.KindTurnStarted, "t_4"))
			},
			want: "starts turn t_4 while turn t_3 is open",
		},
		"turn ended twice": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, eventsFile), eventRecord(fenceOf(t, dir), 9, contract.KindTurnFailed, "t_2"))
			},
			want: `ends turn "t_2", but the open turn is ""`,
		},
		"open turn is reported": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, eventsFile), eventRecord(fenceOf(t, dir), 9, contract.KindTurnStarted, "t_3"))
			},
			check: func(t *testing.T, v Validation) {
				if v.OpenTurn != "t_3" {
					t.Errorf("open turn %q", v.OpenTurn)
				}
			},
		},
		"transcript record is not JSON": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, transcriptFile), string(encodeRecord(fenceOf(t, dir), []byte(`{"role":`), "")))
			},
			want: "not JSON",
		},
		"report without a key": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, outboxFile), string(encodeRecord(fenceOf(t, dir), []byte(`{"kind":"activity"}`), "")))
			},
			want: "without an idempotency key",
		},
		"fence above the lease": {
			damage: func(t *testing.T, dir string) {
				appendRaw(t, filepath.Join(dir, transcriptFile), string(encodeRecord(99, nil, "owner ghost")))
			},
			want: "fence 99, above the lease's 1",
		},
		"cursor inside a record": {
			damage: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, outboxCursor), []byte("7\n"), 0o600)
			},
			want: "outbox cursor 7",
		},
		"checkpoint disagrees with the log": {
			damage: func(t *testing.T, dir string) {
				rewriteCheckpoint(t, dir, func(ck *checkpoint) { ck.State.LastSeq = 5 })
			},
			want: "checkpoint says last seq 5",
		},
		"checkpoint inside a record": {
			damage: func(t *testing.T, dir string) {
				rewriteCheckpoint(t, dir, func(ck *checkpoint) { ck.Transcript.Size-- })
			},
			want: "checkpoint: transcript.jsonl offset",
		},
		"newer format": {
			damage: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, metaFile), []byte(`{"version":99,"conversation_id":"c1"}`), 0o600)
			},
			want: "format version 99",
		},
		"meta of another conversation": {
			damage: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, metaFile), []byte(`{"version":`+strconv.Itoa(FormatVersion)+`,"conversation_id":"c2"}`), 0o600)
			},
			want: `names conversation "c2"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, dir := healthySession(t)
			tc.damage(t, dir)
			v, err := Validate(dir)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
			if tc.check != nil {
				tc.check(t, v)
			}
		})
	}
}

func TestValidateCorruptIsErrCorrupt(t *testing.T) {
	_, dir := healthySession(t)
	appendRaw(t, filepath.Join(dir, outboxFile), "x\n"+string(encodeRecord(1, nil, "owner w")))
	if _, err := Validate(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Validate = %v, want ErrCorrupt", err)
	}
}

// The validator and the store agree: a session the store has opened,
// written, crashed (abandoned without Close) and reopened by another owner
// validates, with what readers see.
func TestValidateAfterTakeover(t *testing.T) {
	dir, c := clockedDir(t)
	a := newStoreAt(t, dir, "a", c)
	sa := mustCreate(t, a, "c1", Meta{})
	appendN(t, sa, 300, contract.KindNotice) // past an index stride
	c.Advance(DefaultLeaseTTL + MaxClockSkew + time.Second)
	sb, err := newStoreAt(t, dir, "b", c).Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, sb, 3, contract.KindNotice)
	v, err := Validate(filepath.Join(dir, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if v.LastSeq != 303 || v.Events != 303 || v.Fence != sb.Fence() || v.Stale != 0 {
		t.Fatalf("validation %+v", v)
	}
	sb.Close()
}

func rewriteCheckpoint(t *testing.T, dir string, edit func(*checkpoint)) {
	t.Helper()
	ck, ok := readCheckpoint(dir)
	if !ok {
		t.Fatal("no checkpoint")
	}
	edit(&ck)
	b, _ := json.Marshal(ck)
	data := append([]byte(strconv.FormatUint(uint64(crc32.Checksum(b, castagnoli)), 10)+"\n"), b...)
	if err := os.WriteFile(filepath.Join(dir, checkpointFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAllReports(t *testing.T) {
	st, _ := healthySession(t)
	s, err := st.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendReport(contract.Report{IdempotencyKey: "c1/late", Kind: contract.ReportActivity, ConversationID: "c1"}); err != nil {
		t.Fatal(err)
	}
	keys := func(rs []contract.Report) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.IdempotencyKey)
		}
		return out
	}
	// The owner returns what is durable, acknowledged or not.
	got, err := s.AllReports()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"c1/t_1", "c1/t_2"}, keys(got)); diff != "" {
		t.Errorf("before Sync (-want +got):\n%s", diff)
	}
	// A read-only reader returns everything written.
	ins, err := st.Inspect("c1")
	if err != nil {
		t.Fatal(err)
	}
	got, err = ins.AllReports()
	ins.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"c1/t_1", "c1/t_2", "c1/late"}, keys(got)); diff != "" {
		t.Errorf("inspect (-want +got):\n%s", diff)
	}
	s.Close()
}
