package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// bodyTimeout is the short body deadline of these tests; a trickling
// client would take trickleBytes × trickleEvery (10 s) to send its body.
const (
	bodyTimeout  = 300 * time.Millisecond
	trickleBytes = 100
	trickleEvery = 100 * time.Millisecond
	// closedWithin is how soon after the deadline the server must have
	// answered and closed the connection: far less than the trickle.
	closedWithin = 3 * time.Second
)

// trickle opens a connection to srv, sends head and then the body one
// piece every trickleEvery, and returns the connection. Its writer stops
// when a write fails (the server closed) or the test ends.
func trickle(t *testing.T, srv *httptest.Server, head string, piece func(i int) string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(trickleEvery)
		defer tick.Stop()
		for i := range trickleBytes {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := io.WriteString(conn, piece(i)); err != nil {
				return
			}
		}
	})
	t.Cleanup(func() {
		close(stop)
		conn.Close()
		wg.Wait()
	})
	return conn
}

// answerAndClose reads the response on conn and then waits for the server
// to close the connection; it returns the status and how long it took
// from start.
func answerAndClose(t *testing.T, conn net.Conn, start time.Time) (int, time.Duration) {
	t.Helper()
	conn.SetReadDeadline(start.Add(bodyTimeout + closedWithin))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", bodyTimeout+closedWithin, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The server must close the connection rather than go on reading.
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the server sent more after its answer")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was still open %v after the request began", time.Since(start))
	}
	return resp.StatusCode, time.Since(start)
}

func TestBodyDeadlineTrickle(t *testing.T) {
	readBody := httpapi.Handle(nil, func(w http.ResponseWriter, r *http.Request) error {
		_, err := httpapi.ReadBody(w, r, 1<<20)
		if err != nil {
			return err
		}
		t.Error("a trickled body was read whole")
		return nil
	})
	refuse := httpapi.Handle(nil, func(w http.ResponseWriter, r *http.Request) error {
		return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "no")
	})
	lengthHead := fmt.Sprintf("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", trickleBytes)
	chunkedHead := "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	oneByte := func(int) string { return "x" }
	oneChunk := func(int) string { return "1\r\nx\r\n" }
	tests := map[string]struct {
		handler http.Handler
		head    string
		piece   func(int) string
		status  int
	}{
		"ReadBody, Content-Length":       {readBody, lengthHead, oneByte, http.StatusBadRequest},
		"ReadBody, chunked":              {readBody, chunkedHead, oneChunk, http.StatusBadRequest},
		"refused unread, Content-Length": {refuse, lengthHead, oneByte, http.StatusForbidden},
		"refused unread, chunked":        {refuse, chunkedHead, oneChunk, http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(httpapi.BodyDeadline(bodyTimeout, tc.handler))
			t.Cleanup(srv.Close)
			start := time.Now()
			conn := trickle(t, srv, tc.head, tc.piece)
			status, took := answerAndClose(t, conn, start)
			if status != tc.status {
				t.Errorf("status %d, want %d", status, tc.status)
			}
			if took > bodyTimeout+closedWithin {
				t.Errorf("closed after %v", took)
			}
		})
	}
}

// TestBodyDeadlineSparesStreams: the deadline ends with the body, so a
// response streamed after it (and a request without a body) runs for as
// long as it takes, with its context alive.
func TestBodyDeadlineSparesStreams(t *testing.T) {
	const lines = 12 // at 100 ms: four times the body deadline
	srv := httptest.NewServer(httpapi.BodyDeadline(bodyTimeout, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if _, err := httpapi.ReadBody(w, r, 1<<10); err != nil {
				t.Errorf("ReadBody: %v", err)
				return
			}
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range lines {
			select {
			case <-r.Context().Done():
				t.Errorf("the request's context ended after %d lines: %v", i, context.Cause(r.Context()))
				return
			case <-tick.C:
			}
			fmt.Fprintf(w, "line %d\n", i)
			http.NewResponseController(w).Flush()
		}
	})))
	t.Cleanup(srv.Close)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"a":1}`)
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL, body)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || strings.Count(string(b), "\n") != lines {
			t.Errorf("%s: %d lines of %d, %v", method, strings.Count(string(b), "\n"), lines, err)
		}
	}
}
