package gateway

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
)

// BenchmarkUpstreamTransport streams a model call's response (88 events,
// one write each, as bench/gateway's simulator sends them) from a loopback
// server through each transport: http.Transport's settings as the gateway
// used them, and the direct transport. Besides time and allocations it
// reports the process's context switches per call (getrusage), which is
// what the hand-offs to http.Transport's write and read loops cost and
// what a loaded machine does not blur as much as time.
func BenchmarkUpstreamTransport(b *testing.B) {
	evs := eventsOfBench(82)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range evs {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	body := strings.Repeat("x", 16<<10)
	for _, tc := range []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"http.Transport", func() http.RoundTripper { return newHTTPTransport() }},
		{"direct", func() http.RoundTripper { return directFor(b, up.URL, nil, nil) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := tc.rt()
			defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			buf := make([]byte, 32<<10)
			var before, after syscall.Rusage
			b.ReportAllocs()
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/messages", strings.NewReader(body))
				res, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := res.Body.Read(buf); err != nil {
						break
					}
				}
				res.Body.Close()
			}
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			sw := (after.Nvcsw - before.Nvcsw) + (after.Nivcsw - before.Nivcsw)
			b.ReportMetric(float64(sw)/float64(b.N), "ctxsw/op")
		})
	}
}

// eventsOfBench is the stream shape of bench/gateway: message_start, a
// text block of deltas, message_delta, message_stop.
func eventsOfBench(deltas int) []string {
	evs := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-6\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":4000,\"output_tokens\":1}}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
	}
	for range deltas {
		evs = append(evs, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" the gateway checks\"}}\n\n")
	}
	return append(evs,
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":250}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	)
}

// BenchmarkUpstreamHead prices the steps of a call that a head writer and
// reader of the gateway's own replace: Request.Write of an upstream
// request (a client's headers and a 16 KiB body, into the pooled write
// buffer as roundTrip does), against writeHeld, which writes it now, and
// http.ReadResponse of an Anthropic-like head (docs/benchmarks.md).
func BenchmarkUpstreamHead(b *testing.B) {
	body := strings.Repeat("x", 16<<10)
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:9", Path: "/v1/messages"}
	request := func(rc io.ReadCloser) *http.Request {
		return &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{
				"Content-Type":      {"application/json"},
				"Accept":            {"application/json"},
				"Anthropic-Version": {"2023-06-01"},
				"Anthropic-Beta":    {"prompt-caching-2024-07-31"},
				"X-Api-Key":         {testAPIKey},
				"X-Stainless-Lang":  {"go"},
				"User-Agent":        {""},
			},
			Body: rc, ContentLength: int64(len(body))}
	}
	b.Run("Request.Write", func(b *testing.B) {
		bw := bufio.NewWriterSize(io.Discard, 64<<10)
		b.ReportAllocs()
		for b.Loop() {
			req := request(io.NopCloser(strings.NewReader(body)))
			if err := req.Write(oneWrite{bw}); err != nil {
				b.Fatal(err)
			}
			bw.Flush()
		}
	})
	b.Run("writeHeld", func(b *testing.B) {
		bw := bufio.NewWriterSize(io.Discard, 64<<10)
		held := &heldBody{b: []byte(body), size: len(body)}
		b.ReportAllocs()
		for b.Loop() {
			req := request(held.reader())
			if ok, err := writeHeld(bw, req); !ok || err != nil {
				b.Fatal(ok, err)
			}
			bw.Flush()
		}
	})
	b.Run("ReadResponse", func(b *testing.B) {
		const head = "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nContent-Type: text/event-stream\r\n" +
			"Request-Id: req_011CV00000000000000000000\r\nAnthropic-Organization-Id: 00000000-0000-0000-0000-000000000000\r\n" +
			"Via: 1.1 google\r\nCf-Ray: 8f0000000000000a-AMS\r\nDate: Thu, 03 Dec 2026 16:49:23 GMT\r\nTransfer-Encoding: chunked\r\n\r\n"
		var rd strings.Reader
		br := bufio.NewReaderSize(&rd, 4<<10)
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(head)
			br.Reset(&rd)
			if _, err := http.ReadResponse(br, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
