package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/store"
)

// A call's purpose comes from the context of a request handed to
// ServeHTTP in process; a worker's request that claims one in a header is
// an agent call like any other.
func TestPurpose(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	body := `{"model":"claude-sonnet-5-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

	hdr := tokenHeader(h.mint(convA))
	hdr.Set("X-Talkide-Purpose", store.PurposeTitle)
	resp := h.post(t, "/v1/messages", hdr, body)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h.waitServed(t)

	req := httptest.NewRequestWithContext(WithPurpose(t.Context(), store.PurposeTitle), http.MethodPost, Prefix+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Worker-Token", h.mint(convA))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.gw.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("in-process call: status %d: %s", w.Code, w.Body)
	}
	h.flush(t)
	var purposes []string
	for _, r := range h.store.records() {
		purposes = append(purposes, r.Purpose)
	}
	if len(purposes) != 2 || purposes[0] != "" || purposes[1] != store.PurposeTitle {
		t.Errorf("purposes %q, want the worker's call none and the in-process one %q", purposes, store.PurposeTitle)
	}
}
