// Package roundtrip sends a test's HTTP request and reads the whole answer,
// so that a test checks the status and the body in one place.
package roundtrip

import (
	"io"
	"net/http"
	"testing"
)

// Do sends req with the default client and returns the response, its body
// closed, and the body. An error before there is a response fails the test.
func Do(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
