package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sse"
)

// TestDevStreamCaps checks the stream caps and the shared worker stream
// through talkide dev's own wiring: its flags, its real worker, its
// metrics.
func TestDevStreamCaps(t *testing.T) {
	st := startDevT(t, roles.DevConfig{DataDir: filepath.Join(t.TempDir(), "data"), Bounds: roles.Bounds{MaxStreamsPerUser: 2, MaxStreamsPerConversation: 16}})
	base := st.Info.ControlPlane
	conv := createConversation(t, base)
	open := func() *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/conversations/"+conv.ID+"/stream", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	var readers []*sse.Reader
	for range 2 {
		resp := open()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream within the cap: %d", resp.StatusCode)
		}
		readers = append(readers, sse.NewReader(resp.Body, 1<<20))
	}
	over := open()
	var e contract.Error
	json.NewDecoder(over.Body).Decode(&e)
	if over.StatusCode != http.StatusTooManyRequests || e.Error.Code != contract.CodeTooManyStreams ||
		over.Header.Get("Retry-After") == "" || !strings.Contains(e.Error.Message, "per-user cap is 2") {
		t.Errorf("the third stream: %d %+v Retry-After %q", over.StatusCode, e, over.Header.Get("Retry-After"))
	}
	// Both streams get the conversation's first event from one worker
	// stream.
	for _, rd := range readers {
		if ev, err := rd.Next(); err != nil || ev.ID != "1" {
			t.Fatalf("first event: %+v %v", ev, err)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		"talkide_streams_open 2\n",
		"talkide_stream_upstreams_open 1\n",
		`talkide_streams_refused_total{limit="user"} 1` + "\n",
		`talkide_streams_refused_total{limit="total"} 0` + "\n",
		"talkide_connections_shed_total 0\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestStreamFlagsRefuseNegative(t *testing.T) {
	for _, flag := range []string{"--max-streams=-1", "--max-streams-per-user=-3", "--max-streams-per-conversation=-1"} {
		code, _, stderr := talkide(t, "dev", "--data-dir", t.TempDir(), flag)
		if code != exitUsage || !strings.Contains(stderr, strings.SplitN(flag, "=", 2)[0]) {
			t.Errorf("talkide dev %s: exit %d, %s", flag, code, stderr)
		}
	}
}
