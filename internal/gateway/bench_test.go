package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkGateway measures one non-streaming call over loopback, straight
// to the upstream and through the gateway; the difference is the gateway's
// overhead (token check, in-memory store, body copy, metering, record, log).
func BenchmarkGateway(b *testing.B) {
	up := httptest.NewServer(fakeAnthropic())
	b.Cleanup(up.Close)
	h := newHarnessURL(b, up.URL, nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)

	// A first turn, and a request the size of a mid-conversation Claude
	// Code turn.
	for _, kb := range []int{1, 200} {
		body := `{"model":"claude-req-model","max_tokens":1024,"messages":[{"role":"user","content":"` +
			strings.Repeat("lorem ipsum ", kb<<10/12) + `"}]}`
		b.Run(fmt.Sprintf("%dKiB/direct", kb), func(b *testing.B) {
			benchCall(b, client, up.URL+"/v1/messages", http.Header{"X-Api-Key": {testAPIKey}}, body)
		})
		b.Run(fmt.Sprintf("%dKiB/gateway", kb), func(b *testing.B) {
			benchCall(b, client, h.url+"/v1/messages", tokenHeader(h.mint(convA)), body)
		})
	}
}

func benchCall(b *testing.B, client *http.Client, url string, hdr http.Header, body string) {
	b.Helper()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = hdr.Clone()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
