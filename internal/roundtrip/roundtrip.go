// Package roundtrip sends a test's HTTP request and reads the whole answer,
// so that a test checks the status and the body in one place.
package roundtrip

import (
	"io"
	"net/http"
	"testing"
)

// Do sends req with the default client and returns the response, its body
// closed, and the body, as With does.
func Do(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, b := With(t, http.DefaultClient, req)
	return resp, string(b)
}

// With sends req with c and returns the response, its body closed, and the
// body. Failing to send req or to read the answer fails the test.
func With(t testing.TB, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", req.Method, req.URL, err)
	}
	return resp, b
}

// Status sends req with c from a goroutine of its own, for a request that
// must be under way while the test does something else (one the server
// holds), and delivers its answer's status once it comes: 0 when req
// could not be sent. The answer's body is read and closed.
func Status(c *http.Client, req *http.Request) <-chan int {
	status := make(chan int, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			status <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	return status
}
