package chatclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

// collect streams conversation id from after until it has seen event
// until, and returns the seqs fn saw.
func collect(t *testing.T, c *Client, id string, after, until int64) []int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var seqs []int64
	err := c.Stream(ctx, id, after, func(ev contract.Event) error {
		seqs = append(seqs, ev.Seq)
		if ev.Seq >= until {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Stream = %v, want nil after the context ended", err)
	}
	return seqs
}

func seqRange(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func TestStreamReconnects(t *testing.T) {
	tests := map[string]struct {
		after      int64
		conns      []connScript
		overlap    int64
		streamFail int
		junk       string
		idle       time.Duration
		wantReqs   []streamReq
	}{
		"from the start, cut twice, overlapping replays": {
			conns:    []connScript{{cutAfter: 5}, {cutAfter: 7}},
			overlap:  2,
			junk:     "id: 99\nevent: text.delta\ndata: {not json\n\n",
			wantReqs: []streamReq{{}, {"5", "5"}, {"7", "7"}},
		},
		"after a seq": {
			after:    3,
			conns:    []connScript{{cutAfter: 6}},
			overlap:  6,
			wantReqs: []streamReq{{"3", "3"}, {"6", "6"}},
		},
		"closed before any event": {
			conns:    []connScript{{cutAfter: -1}},
			wantReqs: []streamReq{{}, {}},
		},
		"server unavailable at first": {
			streamFail: 2,
			wantReqs:   []streamReq{{}, {}, {}},
		},
		"silent connection": {
			conns:    []connScript{{cutAfter: 4, hang: true}},
			idle:     300 * time.Millisecond,
			wantReqs: []streamReq{{}, {"4", "4"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeCP(t)
			f.addConv("c1", 10)
			f.conns, f.overlap, f.streamFail, f.junk = tc.conns, tc.overlap, tc.streamFail, tc.junk
			c := f.client(t, nil)
			if tc.idle > 0 {
				c.idleTimeout = tc.idle
			}
			got := collect(t, c, "c1", tc.after, 10)
			if diff := cmp.Diff(seqRange(tc.after+1, 10), got); diff != "" {
				t.Errorf("seqs (-want +got):\n%s", diff)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if diff := cmp.Diff(tc.wantReqs, f.streamReqs); diff != "" {
				t.Errorf("stream requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStreamFollowsNewEvents(t *testing.T) {
	f := newFakeCP(t)
	f.addConv("c1", 2)
	c := f.client(t, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var kinds []string
	err := c.Stream(ctx, "c1", 0, func(ev contract.Event) error {
		kinds = append(kinds, ev.Kind)
		switch ev.Seq {
		case 2:
			f.startTurn("c1", "hi") // the stream is waiting for news
		case 4:
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{contract.KindTextDelta, contract.KindTextDelta, contract.KindUserMessage, contract.KindTurnStarted}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
}

func TestStreamPermanentErrors(t *testing.T) {
	tests := map[string]struct {
		status int
		ctype  string
		check  func(error) bool
	}{
		"404":                 {404, "application/json", func(err error) bool { return errors.Is(err, ErrNotFound) }},
		"401":                 {401, "application/json", func(err error) bool { return errors.As(err, new(*APIError)) }},
		"403":                 {403, "application/json", func(err error) bool { return errors.As(err, new(*APIError)) }},
		"400":                 {400, "application/json", func(err error) bool { return errors.As(err, new(*APIError)) }},
		"not an event stream": {200, "text/html", func(err error) bool { return errors.Is(err, errNotEventStream) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			requests := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests++
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				w.Write([]byte(`{"error":{"code":"x","message":"y"}}`))
			}))
			defer srv.Close()
			c, err := New(srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			fastRetries(c)
			err = c.Stream(testCtx(t), "c1", 0, func(contract.Event) error {
				t.Error("fn called")
				return nil
			})
			if !tc.check(err) {
				t.Errorf("err = %v", err)
			}
			if requests != 1 {
				t.Errorf("%d requests, want 1", requests)
			}
		})
	}
}

func TestStreamUnknownConversation(t *testing.T) {
	f := newFakeCP(t)
	err := f.client(t, nil).Stream(testCtx(t), "nope", 0, func(contract.Event) error { return nil })
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != contract.CodeNotFound {
		t.Errorf("err = %v, want 404 not_found", err)
	}
}

func TestStreamReturnsCallbackError(t *testing.T) {
	f := newFakeCP(t)
	f.addConv("c1", 5)
	stop := errors.New("stop")
	var seqs []int64
	err := f.client(t, nil).Stream(testCtx(t), "c1", 0, func(ev contract.Event) error {
		seqs = append(seqs, ev.Seq)
		if ev.Seq == 3 {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Errorf("err = %v, want fn's error itself", err)
	}
	if diff := cmp.Diff(seqRange(1, 3), seqs); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
}

func TestStreamLineTooLong(t *testing.T) {
	f := newFakeWithC1(t)
	f.mu.Lock()
	big := make([]byte, maxSSELine+10)
	for i := range big {
		big[i] = 'x'
	}
	f.appendLocked(f.convLocked("c1"), contract.Event{Kind: contract.KindTextDelta, Text: string(big)})
	f.mu.Unlock()
	err := f.client(t, nil).Stream(testCtx(t), "c1", 0, func(contract.Event) error { return nil })
	if err == nil || !permanent(err) {
		t.Errorf("err = %v, want a permanent error", err)
	}
}
