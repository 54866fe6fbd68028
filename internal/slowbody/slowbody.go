// Package slowbody is a client for tests that sends a request body one
// byte at a time, as a slow or hostile client does, to check that a
// server answers it and hangs up once its body deadline has passed.
package slowbody

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Send dials addr and writes head, the request line and headers up to and
// including the blank line, whose Content-Length says size bytes; it then
// writes the byte fill every interval until it has written size of them or
// the server has answered. The answer must come within wait of the start,
// and the server must close the connection after it: anything else fails
// t. Send returns the response and its body.
func Send(t *testing.T, addr, head string, fill byte, size int, every, wait time.Duration) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	io.WriteString(conn, head)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range size {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{fill}); err != nil {
				return
			}
		}
	})
	defer func() { close(stop); conn.Close(); wg.Wait() }()
	conn.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer %v after the request began: %v", time.Since(start), err)
	}
	body, _ := io.ReadAll(resp.Body)
	if _, err := br.ReadByte(); err == nil {
		t.Error("more after the answer")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the connection was still open %v after the request began", time.Since(start))
	}
	return resp, body
}
