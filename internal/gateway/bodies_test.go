package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store"
)

// jsonBody returns a request body of exactly n bytes (n ≥ 64).
func jsonBody(n int) string {
	head := `{"model":"` + testModel + `","max_tokens":16,"pad":"`
	return head + strings.Repeat("x", n-len(head)-2) + `"}`
}

// slowPost starts a POST of body whose first `first` bytes are sent at
// once and the rest only when release is closed; it returns a channel
// that receives the response (or nil and the error).
type result struct {
	resp *http.Response
	err  error
}

func slowPost(h *harness, hdr http.Header, body string, first int, release <-chan struct{}, chunked bool) <-chan result {
	return slowPostTo(h, "/v1/messages", hdr, body, first, release, chunked)
}

func slowPostPath(h *harness, path string, hdr http.Header, body string, first int, release <-chan struct{}) <-chan result {
	return slowPostTo(h, path, hdr, body, first, release, false)
}

func slowPostTo(h *harness, path string, hdr http.Header, body string, first int, release <-chan struct{}, chunked bool) <-chan result {
	pr, pw := io.Pipe()
	go func() {
		if _, err := io.WriteString(pw, body[:first]); err != nil {
			return
		}
		<-release
		io.WriteString(pw, body[first:])
		pw.Close()
	}()
	out := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.url+path, pr)
		if !chunked {
			req.ContentLength = int64(len(body))
		}
		req.Header = hdr.Clone()
		// A connection of its own: an early answer closes it.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		out <- result{resp, err}
	}()
	return out
}

func await(t *testing.T, ch <-chan result) *http.Response {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.resp
	case <-time.After(waitLimit):
		t.Fatal("no answer")
		return nil
	}
}

// wantOverloaded checks an answer refused for want of room for its body.
func wantOverloaded(t *testing.T, resp *http.Response) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != bodyRetryAfter {
		t.Fatalf("status %d, Retry-After %q; want 503, %s", resp.StatusCode, resp.Header.Get("Retry-After"), bodyRetryAfter)
	}
	var e anthropicError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Type != "error" || e.Error.Type != errOverloaded {
		t.Fatalf("body %+v (%v); want an overloaded_error", e, err)
	}
}

// TestBodiesBounded performs the attack of many concurrent large bodies
// sent slowly: the gateway holds no more than MaxBuffered bytes of them
// at once, refuses the rest before reading them, and serves the admitted
// ones once they arrive.
func TestBodiesBounded(t *testing.T) {
	const (
		max  = 4 << 20
		size = 1536 << 10 // two fit, a third does not
		n    = 6
	)
	h := newHarness(t, fakeAnthropic(), &Options{MaxBuffered: max, MaxBody: 2 << 20})
	hdr := tokenHeader(h.mint(convA))
	release := make(chan struct{})
	var calls []<-chan result
	for range n {
		calls = append(calls, slowPost(h, hdr, jsonBody(size), 1000, release, false))
	}
	// The refused ones are answered while their bodies are still unsent;
	// the admitted ones wait for theirs.
	var admitted []<-chan result
	refused := 0
	deadline := time.After(waitLimit)
	for refused < n-2 {
		got := false
		for i, ch := range calls {
			if ch == nil {
				continue
			}
			select {
			case r := <-ch:
				if r.err != nil {
					t.Fatal(r.err)
				}
				wantOverloaded(t, r.resp)
				refused++
				calls[i], got = nil, true
			default:
			}
		}
		if !got {
			select {
			case <-deadline:
				t.Fatalf("%d refused, want %d", refused, n-2)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for _, ch := range calls {
		if ch != nil {
			admitted = append(admitted, ch)
		}
	}
	if used, peak := h.gw.bodies.State(); used != 2*size || peak > max {
		t.Fatalf("held %d bytes (peak %d) with the bodies under way; want %d, at most %d", used, peak, 2*size, max)
	}
	close(release)
	for _, ch := range admitted {
		if resp := await(t, ch); resp.StatusCode != http.StatusOK {
			t.Fatalf("admitted call: status %d: %s", resp.StatusCode, readAll(t, resp.Body))
		}
	}
	if used, peak := h.gw.bodies.State(); used != 0 || peak > max {
		t.Fatalf("held %d bytes (peak %d) after the calls; want 0, at most %d", used, peak, max)
	}
	// With room again, a body passes.
	if resp := h.post(t, "/v1/messages", hdr, jsonBody(size)); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after the attack", resp.StatusCode)
	}
}

// TestBodyOfUnknownLength: a chunked body takes room as it grows, and is
// refused part-way when there is none.
func TestBodyOfUnknownLength(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), &Options{MaxBuffered: 1 << 20})
	hdr := tokenHeader(h.mint(convA))
	// A chunked body that fits passes, and its room is given back.
	release := make(chan struct{})
	close(release)
	if resp := await(t, slowPost(h, hdr, jsonBody(300<<10), 1000, release, true)); resp.StatusCode != http.StatusOK {
		t.Fatalf("chunked body: status %d", resp.StatusCode)
	}
	if used, _ := h.gw.bodies.State(); used != 0 {
		t.Fatalf("held %d bytes after the call", used)
	}

	// One body of 768 KiB under way; a chunked one of 512 KiB then finds
	// room for its first buffers but not for its growth to 256 KiB.
	hold := make(chan struct{})
	first := slowPost(h, hdr, jsonBody(768<<10), 1000, hold, false)
	deadline := time.Now().Add(waitLimit)
	for used, _ := h.gw.bodies.State(); used != 768<<10; used, _ = h.gw.bodies.State() {
		if time.Now().After(deadline) {
			t.Fatalf("the first body holds %d bytes", used)
		}
		time.Sleep(time.Millisecond)
	}
	// 200 KiB sent, the rest held back: the refusal comes while the
	// client waits, as it would for a slow sender.
	never := make(chan struct{})
	wantOverloaded(t, await(t, slowPost(h, hdr, jsonBody(512<<10), 200<<10, never, true)))
	close(hold)
	if resp := await(t, first); resp.StatusCode != http.StatusOK {
		t.Fatalf("first body: status %d", resp.StatusCode)
	}
	if used, peak := h.gw.bodies.State(); used != 0 || peak > 1<<20 {
		t.Fatalf("held %d bytes, peak %d", used, peak)
	}
}

// TestBodyRefusedBeforeRead: requests refused on their headers (no token,
// a bad one, a declared length over MaxBody, the wrong conversation) take
// no room: their bodies are never read.
func TestBodyRefusedBeforeRead(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), &Options{MaxBuffered: 8 << 20, MaxBody: 1 << 20})
	good := h.mint(convA)
	never := make(chan struct{}) // the bodies' rest is never sent
	for name, c := range map[string]struct {
		hdr    http.Header
		size   int
		status int
	}{
		"no token":             {http.Header{}, 512 << 10, http.StatusUnauthorized},
		"bad token":            {tokenHeader(flip(good, 10)), 512 << 10, http.StatusUnauthorized},
		"too large":            {tokenHeader(good), 2 << 20, http.StatusRequestEntityTooLarge},
		"other conversation":   {http.Header{"X-Worker-Token": {good}, ConversationHeader: {convB.ID}}, 512 << 10, http.StatusForbidden},
		"bad conversation":     {http.Header{"X-Worker-Token": {good}, ConversationHeader: {"../x"}}, 512 << 10, http.StatusBadRequest},
		"unknown conversation": {tokenHeader(h.mint(store.Conversation{ID: "conv-nowhere", Tenant: "acme", Env: "prod"})), 512 << 10, http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			resp := await(t, slowPost(h, c.hdr, jsonBody(c.size), 1000, never, false))
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, readAll(t, resp.Body))
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	if _, peak := h.gw.bodies.State(); peak != 0 {
		t.Fatalf("requests refused on their headers took %d bytes of room", peak)
	}
}

// TestBodyReleasedOnceForwarded: a call holds its body's room only until
// the upstream has the body, not for the length of its stream.
func TestBodyReleasedOnceForwarded(t *testing.T) {
	proceed := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, cannedEvents[0])
		w.(http.Flusher).Flush()
		<-proceed
		for _, ev := range cannedEvents[1:] {
			io.WriteString(w, ev)
		}
	})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	defer release() // a failed check must not leave the upstream waiting
	h := newHarness(t, up, &Options{MaxBuffered: 1 << 20})
	size := 200 << 10
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(jsonBody(size)))
	req.Header = tokenHeader(h.mint(convA))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, len(cannedEvents[0]))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	// The room taken is the pooled buffer's: 256 KiB.
	used, peak := h.gw.bodies.State()
	if want := bodyCap(int64(size)); used != 0 || peak != want {
		t.Fatalf("mid-stream: held %d bytes (peak %d); want 0 (peak %d)", used, peak, want)
	}
	release()
	if rest := readAll(t, resp.Body); !strings.HasSuffix(rest, cannedEvents[len(cannedEvents)-1]) {
		t.Fatalf("stream %q", rest)
	}
}

// lateEOFTransport reads the request body's bytes, answers, and reads the
// body once more only when the response body is first read, after the
// gateway released the request body: as http.Transport's writer may, to
// see the body's end.
type lateEOFTransport struct{ lateErr chan error }

func (t lateEOFTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	buf := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Request: r,
		Body: &lateBody{r: strings.NewReader(cannedJSON), first: func() {
			_, err := r.Body.Read(make([]byte, 16))
			t.lateErr <- err
		}}}, nil
}

type lateBody struct {
	r     io.Reader
	first func()
}

func (b *lateBody) Read(p []byte) (int, error) {
	if b.first != nil {
		b.first()
		b.first = nil
	}
	return b.r.Read(p)
}

func (b *lateBody) Close() error { return nil }

// TestBodyEndAfterRelease: a read at the body's end after its release is
// its end, not an error (which made the transport close the upstream
// connection mid-response).
func TestBodyEndAfterRelease(t *testing.T) {
	tr := lateEOFTransport{lateErr: make(chan error, 1)}
	h := newHarnessURL(t, "http://upstream.invalid", &Options{Transport: tr})
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), jsonBody(4096))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := <-tr.lateErr; err != io.EOF {
		t.Fatalf("read after the end, after release: %v, want io.EOF", err)
	}
	if used, _ := h.gw.bodies.State(); used != 0 {
		t.Fatalf("held %d bytes", used)
	}
}

// TestSpentLimitRefusedBeforeBody: once a limit with nothing left has
// refused a user's call, the user's next calls are refused on their
// headers, before their bodies are read (a body that never arrives is
// answered at once), until the limit changes.
func TestSpentLimitRefusedBeforeBody(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	svc := newBudget(t, &budget.Options{Now: func() time.Time { return now }})
	h := newHarness(t, fakeAnthropic(), &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.RequestsPerMinute, Max: 1}); err != nil {
		t.Fatal(err)
	}
	hdr := tokenHeader(h.mint(convA))
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp := h.post(t, "/v1/messages", hdr, jsonBody(1000))
		readAll(t, resp.Body)
		h.waitServed(t)
		if resp.StatusCode != want {
			t.Fatalf("call %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	_, peak := h.gw.bodies.State()
	never := make(chan struct{})
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		resp := await(t, slowPostPath(h, path, hdr, jsonBody(64<<10), 1000, never))
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" {
			t.Fatalf("%s: status %d, Retry-After %q; want 429, 30", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if body := readAll(t, resp.Body); decodeError(t, body) != errRateLimit || !strings.Contains(body, "requests_per_minute") {
			t.Fatalf("%s: %s", path, body)
		}
	}
	if _, p := h.gw.bodies.State(); p != peak {
		t.Fatalf("refused on their headers, the calls took room: peak %d → %d", peak, p)
	}
	// Another user is not refused; a raised limit applies at once.
	if resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convB)), jsonBody(1000)); resp.StatusCode != http.StatusOK {
		t.Fatalf("another user: status %d", resp.StatusCode)
	}
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.RequestsPerMinute, Max: 10}); err != nil {
		t.Fatal(err)
	}
	if resp := h.post(t, "/v1/messages", hdr, jsonBody(1000)); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the limit was raised: status %d", resp.StatusCode)
	}
}

// TestRefusedOnlyWhenNothingIsLeft: a denial that depends on the call (in
// flight, or too large alone) is not remembered: the next call's body is
// read and judged.
func TestRefusedOnlyWhenNothingIsLeft(t *testing.T) {
	svc := newBudget(t, nil)
	h := newHarness(t, fakeAnthropic(), &Options{Budget: svc})
	// A spending limit of a tenth of a cent: a call asking for many
	// output tokens is more than it alone; a small one fits.
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: int64(budget.Dollar / 1000)}); err != nil {
		t.Fatal(err)
	}
	hdr := tokenHeader(h.mint(convA))
	big := `{"model":"` + testModel + `","max_tokens":100000,"messages":[]}`
	resp := h.post(t, "/v1/messages", hdr, big)
	readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a call larger than the limit: status %d", resp.StatusCode)
	}
	if d := svc.Refused(budget.Call{Tenant: convA.Tenant, Env: convA.Env, User: convA.UserID}, false); d != nil {
		t.Fatalf("remembered a denial of one call: %v", d)
	}
}

// TestBodyCap: a body up to maxPooledBody takes a pooled buffer of the
// least power of two that holds it, 4 KiB at least; a larger body a
// buffer of its own size, which no pool takes back.
func TestBodyCap(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10},
		{16 << 10, 16 << 10}, {200 << 10, 256 << 10},
		{512 << 10, 512 << 10}, {512<<10 + 1, 512<<10 + 1}, {32 << 20, 32 << 20},
	} {
		got := bodyCap(c.n)
		if got != c.want {
			t.Errorf("bodyCap(%d) = %d, want %d", c.n, got, c.want)
		}
		if pooled := sizePool(got) != nil; pooled != (c.n <= maxPooledBody) {
			t.Errorf("a body of %d bytes pooled: %v", c.n, pooled)
		}
	}
	for _, c := range []int64{0, 2 << 10, 12 << 10, 1 << 20} {
		if sizePool(c) != nil {
			t.Errorf("a pool for capacity %d", c)
		}
	}
}

// TestPooledBodiesIntact sends calls at once whose bodies take buffers of
// one pool, each body different: each must reach the upstream as it was
// sent, so no buffer is reused while a call still holds it.
func TestPooledBodiesIntact(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[string(b)] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, cannedJSON)
	})
	h := newHarness(t, up, nil)
	hdr := tokenHeader(h.mint(convA))
	const calls = 64
	bodies := make([]string, calls)
	var wg sync.WaitGroup
	for i := range bodies {
		bodies[i] = strings.Replace(jsonBody(16<<10), "xxxxxxxx", fmt.Sprintf("%08d", i), 1)
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(bodies[i]))
			req.Header = hdr.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("call %d: status %d", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	for i, b := range bodies {
		if !seen[b] {
			t.Errorf("call %d's body did not reach the upstream as sent", i)
		}
	}
}
