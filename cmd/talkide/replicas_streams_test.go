package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/roles"
)

// TestReplicaStreamCaps: two replicas on one PostgreSQL with a per-user cap
// of 2. Two streams on replica A; a third on B is refused 429 once B has
// read A's counts; after one of A's closes, B admits one; a replica that
// dies without withdrawing its counts stops counting after the TTL.
func TestReplicaStreamCaps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two control-planes and a worker")
	}
	logs := failureLogs(t)
	// The TTL is long beside the interval, so that the step that relies on
	// a crashed replica's counts still being counted has seconds of slack.
	const interval, ttl = 100 * time.Millisecond, 4 * time.Second
	rs := startReplicaStackWith(t, 2, logs, "", func(o *roles.ControlPlaneConfig) {
		o.MaxStreamsPerUser = 2
		o.ShareInterval, o.ShareTTL = interval, ttl
	})
	token := rs.addUser("ann")
	client, err := chatclient.New(rs.url(0), &chatclient.Options{Token: token})
	must(t, err)
	conv, err := client.CreateConversation(t.Context(), "capped", "")
	must(t, err)
	a, b := rs.url(0), rs.url(1)

	var held []*http.Response
	t.Cleanup(func() {
		for _, r := range held {
			r.Body.Close()
		}
	})
	hold := func(base string) {
		t.Helper()
		resp, status := openStream(t, base, conv.ID, token)
		if status != http.StatusOK {
			t.Fatalf("stream on %s: %d, want 200", base, status)
		}
		held = append(held, resp)
	}
	hold(a)
	hold(a)

	// B refuses once it has read A's counts; a stream it admits before
	// that is closed again at once.
	poll.Until(t, "B refuses a third stream of the user", func() bool {
		return tryStream(t, b, conv.ID, token, false) == http.StatusTooManyRequests
	})
	if got, want := rs.replicas[0].Server.StreamsOpen()+rs.replicas[1].Server.StreamsOpen(), 2; got != want {
		t.Errorf("streams open on both replicas: %d, want %d", got, want)
	}

	// One of A's closes: B admits within the interval, and keeps it.
	held[0].Body.Close()
	held = held[1:]
	var onB *http.Response
	poll.Until(t, "B admits a stream once one of A's closed", func() bool {
		resp, status := openStream(t, b, conv.ID, token)
		if status == http.StatusOK {
			onB = resp
			return true
		}
		return false
	})
	held = append(held, onB)
	// The cap holds the other way too: A now counts B's.
	poll.Until(t, "A refuses a stream while A and B hold one each", func() bool {
		return tryStream(t, a, conv.ID, token, false) == http.StatusTooManyRequests
	})

	// A dies: it publishes nothing more, withdraws nothing. Its one
	// stream is still counted until its heartbeat is older than the TTL.
	crashed := time.Now()
	rs.crash(0)
	if status := tryStream(t, b, conv.ID, token, false); status != http.StatusTooManyRequests {
		if time.Since(crashed) < ttl-2*interval {
			t.Errorf("B right after A died: %d, want 429 (A's stream is counted until the TTL)", status)
		}
	}
	poll.Until(t, "B admits a second stream after the dead replica's TTL", func() bool {
		resp, status := openStream(t, b, conv.ID, token)
		if status == http.StatusOK {
			held = append(held, resp)
			return true
		}
		return false
	})
	// B holds the cap itself now.
	if status := tryStream(t, b, conv.ID, token, true); status != http.StatusTooManyRequests {
		t.Errorf("B's third stream: %d, want 429", status)
	}
}

// openStream opens the conversation's stream at base and returns the
// response, whose body the caller closes when the status is 200 (any
// other's is closed already).
func openStream(t *testing.T, base, conv, token string) (*http.Response, int) {
	t.Helper()
	resp := getStream(t, base, conv, token)
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
	}
	return resp, resp.StatusCode
}

// tryStream opens a stream at base and closes it at once; a refusal must
// be a 429 too_many_streams naming the per-user cap with Retry-After, and
// with strict, nothing else is expected than that refusal.
func tryStream(t *testing.T, base, conv, token string, strict bool) int {
	t.Helper()
	resp := getStream(t, base, conv, token)
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if strict {
			t.Errorf("stream on %s admitted, want 429", base)
		}
	case http.StatusTooManyRequests:
		body, _ := io.ReadAll(resp.Body)
		var e contract.Error
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != contract.CodeTooManyStreams ||
			!strings.Contains(e.Error.Message, "per-user cap is 2, across the control-plane replicas") {
			t.Errorf("refusal %s: want code %s naming the per-user cap across the replicas", body, contract.CodeTooManyStreams)
		}
		if got := resp.Header.Get("Retry-After"); got != "5" {
			t.Errorf("refusal's Retry-After = %q, want 5", got)
		}
	default:
		t.Fatalf("stream on %s: %d, want 200 or 429", base, resp.StatusCode)
	}
	return resp.StatusCode
}

// crash takes replica i away as a process that dies does: it stops
// publishing its stream counts first (so that its streams' ends, which
// only its memory sees, reach no one), then its connections are cut. It
// withdraws nothing; its store connections and background work are
// released when the test ends.
func (rs *replicaStack) crash(i int) {
	rs.mu.Lock()
	cp := rs.replicas[i]
	rs.replicas[i] = nil
	rs.mu.Unlock()
	cp.Crash()
	rs.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp.Stop(ctx)
	})
}

// getStream asks for the conversation's stream at base as the holder of
// token.
func getStream(t *testing.T, base, conv, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/conversations/"+conv+"/stream", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	return resp
}
