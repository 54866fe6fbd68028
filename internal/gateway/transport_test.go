package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/poll"
)

// TestUpstreamConnectionsReused checks that the default Transport keeps
// an idle connection for every stream that ran at once: rounds of
// concurrent calls after the first open no new upstream connections.
// (With http.DefaultTransport's two idle connections per host, each later
// round of 16 opened 14.)
func TestUpstreamConnectionsReused(t *testing.T) {
	const (
		streams = 16
		rounds  = 4
	)
	// The upstream holds each call until all of its round have arrived, so
	// that a round really needs streams connections at once.
	var (
		mu      sync.Mutex
		arrived int
		release = make(chan struct{})
	)
	up := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		arrived++
		ch := release
		if arrived%streams == 0 {
			close(release)
			release = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(waitLimit):
			t.Error("a round's calls did not all reach the upstream")
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, cannedJSON)
	}
	srv, h, _, conns := gatewayOnCountedUpstream(t, up)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * streams}}
	defer client.CloseIdleConnections()
	tok := h.mint(convA)

	for round := range rounds {
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodPost, srv.URL+Prefix+"/v1/messages", strings.NewReader(requestBody))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set(TokenHeader, tok)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("round %d: status %d", round, resp.StatusCode)
				}
			})
		}
		wg.Wait()
	}
	// Ideally streams; a call that finds no idle connection at once may
	// dial while one is being returned, hence the slack.
	if n := conns.opened.Load(); n > 2*streams {
		t.Errorf("%d upstream connections for %d rounds of %d concurrent calls, want about %d", n, rounds, streams, streams)
	}
	t.Logf("%d upstream connections for %d rounds of %d concurrent calls", conns.opened.Load(), rounds, streams)
}

// TestCloseClosesIdleUpstreamConnections checks that Close closes the
// idle upstream connections, whose reader and writer goroutines in
// http.Transport end with them.
func TestCloseClosesIdleUpstreamConnections(t *testing.T) {
	srv, h, gw, conns := gatewayOnCountedUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, cannedJSON)
	})
	req, err := http.NewRequest(http.MethodPost, srv.URL+Prefix+"/v1/messages", strings.NewReader(requestBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(TokenHeader, h.mint(convA))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := conns.open.Load(); n != 1 {
		t.Fatalf("%d upstream connections open after the call, want the idle one", n)
	}
	if err := gw.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the idle upstream connection to close", func() bool { return conns.open.Load() == 0 })
}

// connCounts are the connections an upstream accepted, and those open.
type connCounts struct{ opened, open atomic.Int64 }

// gatewayOnCountedUpstream serves a gateway with the default Transport in
// front of an upstream that runs up and counts its connections.
func gatewayOnCountedUpstream(t *testing.T, up http.HandlerFunc) (*httptest.Server, *harness, *Gateway, *connCounts) {
	t.Helper()
	var c connCounts
	us := httptest.NewUnstartedServer(up)
	us.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			c.opened.Add(1)
			c.open.Add(1)
		case http.StateClosed:
			c.open.Add(-1)
		}
	}
	us.Start()
	t.Cleanup(us.Close)
	u, err := url.Parse(us.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessURL(t, us.URL, nil)
	gw := New(u, testAPIKey, h.keys, h.store, nil)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv, h, gw, &c
}
