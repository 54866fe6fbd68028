package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// brokenLog is a container's log served as the API server serves it, by
// streams that each break after a few bytes, often in the middle of a
// line; the container ends after a number of opens.
type brokenLog struct {
	mu        sync.Mutex
	lines     []string // "ts text\n"
	breakAt   int      // bytes a follow stream serves before it breaks
	endAfter  int      // opens after which the container has ended
	opens     int
	sinceSeen []time.Time
}

func (l *brokenLog) Ended(context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opens >= l.endAfter, nil
}

func (l *brokenLog) Open(_ context.Context, since time.Time, follow bool) (io.ReadCloser, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opens++
	l.sinceSeen = append(l.sinceSeen, since)
	if l.opens%4 == 2 {
		return nil, errors.New("connection refused") // now and then, no stream at all
	}
	since = since.Truncate(time.Second) // sinceTime has a precision of seconds
	var b strings.Builder
	for _, line := range l.lines {
		ts, _, _ := strings.Cut(line, " ")
		t, _ := time.Parse(time.RFC3339Nano, ts)
		if !t.Before(since) {
			b.WriteString(line)
		}
	}
	s := b.String()
	if follow && len(s) > l.breakAt {
		s = s[:l.breakAt]
	}
	return io.NopCloser(strings.NewReader(s)), nil
}

func TestFollowLogBrokenStreams(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var want strings.Builder
	log := &brokenLog{breakAt: 2500, endAfter: 1 << 30}
	for i := range 300 {
		// Several lines share a second, and some share a timestamp exactly.
		ts := base.Add(time.Duration(i/3) * 100 * time.Millisecond)
		text := fmt.Sprintf("line %03d of the build\n", i)
		log.lines = append(log.lines, ts.Format(time.RFC3339Nano)+" "+text)
		want.WriteString(text)
	}
	// Each stream breaks after 2500 bytes, mid-line, and repeats the
	// second it starts in; the container ends after 12 opens, before the
	// streams have caught up: the final read brings the rest.
	log.endAfter = 12
	var out bytes.Buffer
	if err := FollowLog(context.Background(), log, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != want.String() {
		t.Errorf("lines lost or doubled:\n got %d bytes\nwant %d bytes\nfirst difference near %q", out.Len(), want.Len(), firstDiff(out.String(), want.String()))
	}
	if len(log.sinceSeen) < 3 || !log.sinceSeen[0].IsZero() || log.sinceSeen[len(log.sinceSeen)-1].IsZero() {
		t.Errorf("reconnections did not carry sinceTime: %v", log.sinceSeen)
	}
}

func TestFollowLogPartialLineAtTheEnd(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339Nano)
	log := &brokenLog{lines: []string{ts + " one\n", ts + " two without newline"}, breakAt: 1 << 20, endAfter: 1}
	var out bytes.Buffer
	if err := FollowLog(context.Background(), log, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "one\ntwo without newline" {
		t.Errorf("got %q", got)
	}
}

func TestFollowLogStopsWithContext(t *testing.T) {
	log := &brokenLog{breakAt: 0, endAfter: 1 << 30} // never ends
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := FollowLog(ctx, log, io.Discard); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("FollowLog = %v, want the context's error", err)
	}
}

func TestReadLineCutsLongLines(t *testing.T) {
	var out bytes.Buffer
	var d dedupe
	long := strings.Repeat("x", maxLogLine*2)
	d.copy(strings.NewReader("2026-01-02T03:04:05Z "+long+"\n2026-01-02T03:04:06Z next\n"), &out, false)
	if out.Len() > maxLogLine+100 || !strings.HasSuffix(out.String(), " [line cut]\nnext\n") {
		t.Errorf("long line: %d bytes, ends %q", out.Len(), out.String()[max(0, out.Len()-30):])
	}
}

func firstDiff(a, b string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[max(0, i-20):min(len(a), i+20)]
		}
	}
	return "(one is a prefix of the other)"
}
