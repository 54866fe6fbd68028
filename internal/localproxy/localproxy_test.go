package localproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/sse"
)

// gatewayPath is where the control-plane serves the gateway.
const gatewayPath = "/api/internal/gateway/anthropic"

// mintServer is a fake mint endpoint issuing "wt-<conversation>-<n>"; it
// refuses the conversations in refuse.
type mintServer struct {
	srv    *httptest.Server
	refuse map[string]bool

	mu     sync.Mutex
	issued map[string][]string // guarded by mu: tokens by conversation
	n      int                 // guarded by mu
}

func newMintServer(t *testing.T, refuse ...string) *mintServer {
	t.Helper()
	m := &mintServer{refuse: map[string]bool{}, issued: map[string][]string{}}
	for _, c := range refuse {
		m.refuse[c] = true
	}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req contract.MintRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != minting.MintPath {
			http.Error(w, "bad mint request", http.StatusBadRequest)
			return
		}
		if m.refuse[req.ConversationID] || r.Header.Get("Authorization") != "Bearer tki_test.identity" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":{"code":"forbidden","message":"not your conversation"}}`)
			return
		}
		m.mu.Lock()
		m.n++
		tok := fmt.Sprintf("wt-%s-%d", req.ConversationID, m.n)
		m.issued[req.ConversationID] = append(m.issued[req.ConversationID], tok)
		m.mu.Unlock()
		json.NewEncoder(w).Encode(contract.MintResponse{Token: tok, ExpiresAt: time.Now().Add(2 * time.Minute), KeyID: "k1"})
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mintServer) tokens(conv string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.issued[conv]...)
}

// received is a request as the fake gateway saw it.
type received struct {
	Path, RawQuery string
	Header         http.Header
	Body           string
}

// gateway is a fake control-plane gateway recording what it receives;
// handle answers (nil: 200 {"ok":true}).
type gateway struct {
	srv    *httptest.Server
	handle http.HandlerFunc

	mu  sync.Mutex
	got []received // guarded by mu
}

func newGateway(t *testing.T, handle http.HandlerFunc) *gateway {
	t.Helper()
	g := &gateway{handle: handle}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.got = append(g.got, received{Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(b)})
		g.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		if g.handle != nil {
			g.handle(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) received() []received {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]received(nil), g.got...)
}

// startProxy runs a LocalGatewayProxy for gw with a minter on ms.
func startProxy(t *testing.T, gwURL string, ms *mintServer) *Server {
	t.Helper()
	return startProxyWith(t, gwURL, ms, nil)
}

func startProxyWith(t *testing.T, gwURL string, ms *mintServer, opts *Options) *Server {
	t.Helper()
	u, err := url.Parse(gwURL + gatewayPath)
	if err != nil {
		t.Fatal(err)
	}
	minter := minting.New(ms.srv.URL, func() (string, error) { return "tki_test.identity", nil }, nil)
	s, err := Listen(New(u, minter, opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

func TestForwardsWithFreshToken(t *testing.T) {
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, ms)

	for _, conv := range []string{"conv-a", "conv-b"} {
		req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor(conv)+"/v1/messages?beta=true", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer "+s.Capability(conv))
		req.Header.Set("Cookie", "a=b")
		req.Header.Set("X-Talkide-Conversation", "someone-else")
		req.Header.Set("X-Talkide-Tenant", "evil")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, body := roundtrip.Do(t, req)
		if resp.StatusCode != http.StatusOK || body != `{"ok":true}` {
			t.Fatalf("%s: status %d body %q", conv, resp.StatusCode, body)
		}
		all := gw.received()
		got := all[len(all)-1]
		if got.Path != gatewayPath+"/v1/messages" || got.RawQuery != "" {
			t.Errorf("%s: gateway got path %q query %q", conv, got.Path, got.RawQuery)
		}
		toks := ms.tokens(conv)
		if len(toks) != 1 || got.Header.Get(minting.TokenHeader) != toks[0] {
			t.Errorf("%s: gateway got token %q, minted %q", conv, got.Header.Get(minting.TokenHeader), toks)
		}
		if v := got.Header.Values(minting.ConversationHeader); len(v) != 1 || v[0] != conv {
			t.Errorf("%s: %s = %q", conv, minting.ConversationHeader, v)
		}
		for _, h := range []string{"Authorization", "X-Api-Key", "Cookie", "X-Talkide-Tenant"} {
			if v := got.Header.Get(h); v != "" {
				t.Errorf("%s: %s reached the gateway: %q", conv, h, v)
			}
		}
		if got.Header.Get("Anthropic-Version") != "2023-06-01" || got.Body != `{"model":"m"}` {
			t.Errorf("%s: other headers or the body were not forwarded: %v %q", conv, got.Header, got.Body)
		}
	}
}

func TestStreamsUnbuffered(t *testing.T) {
	firstRead := make(chan struct{})
	gw := newGateway(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		sse.Write(w, "", "message_start", []byte(`{"n":1}`))
		w.(http.Flusher).Flush()
		// The second event is written only once the client has read the
		// first through the proxy: a buffering proxy would deadlock here
		// until the client's timeout.
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		sse.Write(w, "", "message_stop", []byte(`{"n":2}`))
	})
	s := startProxy(t, gw.srv.URL, newMintServer(t))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.BaseURLFor("conv-sse")+"/v1/messages", strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-Api-Key", s.Capability("conv-sse"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := sse.NewReader(resp.Body, 1<<16)
	ev, err := r.Next()
	if err != nil || ev.Event != "message_start" {
		t.Fatalf("first event %+v, %v (was the stream buffered?)", ev, err)
	}
	close(firstRead)
	ev, err = r.Next()
	if err != nil || ev.Event != "message_stop" || string(ev.Data) != `{"n":2}` {
		t.Fatalf("second event %+v, %v", ev, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last event: %v, want EOF", err)
	}
}

// A gateway may answer before the whole request body has arrived (a
// refusal does). The proxy relays that answer at once and still passes on
// the rest of the body. A server that reads what is left of the body when
// its answer starts would hold the answer until the client finished
// sending. With a body of known length it would instead close the body
// under the Transport's last read, and the Transport would then close the
// upstream connection in the middle of the answer.
func TestRelaysAnAnswerBeforeTheBodyEnds(t *testing.T) {
	gotBody := make(chan string, 1)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		sse.Write(w, "", "message_start", []byte(`{"n":1}`))
		w.(http.Flusher).Flush()
		b, _ := io.ReadAll(r.Body)
		gotBody <- string(b)
		sse.Write(w, "", "message_stop", []byte(`{"n":2}`))
	}))
	t.Cleanup(gw.Close)
	s := startProxy(t, gw.URL, newMintServer(t))

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-early")+"/v1/messages", pr)
	req.Header.Set("X-Api-Key", s.Capability("conv-early"))
	// The body's two halves, in order, from one goroutine: the second
	// once the client has the answer's first event.
	firstEvent := make(chan struct{})
	go func() {
		pw.Write([]byte(`{"stream":`))
		<-firstEvent
		pw.Write([]byte(`true}`))
		pw.Close()
	}()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		done <- result{resp, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		close(firstEvent)
		pw.CloseWithError(io.ErrUnexpectedEOF)
		t.Fatal("the answer waited for the end of the request body")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.resp.Body.Close()
	r := sse.NewReader(res.resp.Body, 1<<16)
	if ev, err := r.Next(); err != nil || ev.Event != "message_start" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	close(firstEvent)
	if ev, err := r.Next(); err != nil || ev.Event != "message_stop" {
		t.Fatalf("second event %+v, %v", ev, err)
	}
	select {
	case got := <-gotBody:
		if got != `{"stream":true}` {
			t.Errorf("the gateway got the body %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never got the whole body")
	}
}

// anthropicError is the Anthropic error shape the proxy answers in.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func checkAnthropicError(t *testing.T, resp *http.Response, body string, status int, typ string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var e anthropicError
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("body %q is not the Anthropic error shape: %v", body, err)
	}
	if e.Type != "error" || e.Error.Type != typ || e.Error.Message == "" {
		t.Errorf("error %+v, want type %q", e, typ)
	}
}

func TestRefusesInvalidPaths(t *testing.T) {
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, ms)
	for name, path := range map[string]string{
		"dot dot":         "/../v1/messages",
		"encoded dot dot": "/%2e%2e/v1/messages",
		"encoded slash":   "/a%2Fb/v1/messages",
		"empty":           "//v1/messages",
		"root":            "/",
		"dot":             "/a.b/v1/messages",
		"too long":        "/" + strings.Repeat("x", 129) + "/v1/messages",
		// Dot segments after a valid id would leave the gateway prefix.
		"escape the gateway":         "/conv-1/../../../api/v1/worker-gateway/token/mint",
		"escape the gateway encoded": "/conv-1/%2e%2e/%2E%2E/x",
		"dot segment inside":         "/conv-1/v1/../../x",
		"single dot":                 "/conv-1/./v1/messages",
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader("{}"))
			// Send the path exactly as written: no client-side cleaning or
			// re-escaping. (An opaque "//…" would read as an authority.)
			if strings.HasPrefix(path, "//") {
				req.URL.Path = path
			} else {
				req.URL.Opaque = path
			}
			resp, body := roundtrip.Do(t, req)
			checkAnthropicError(t, resp, body, http.StatusBadRequest, "invalid_request_error")
		})
	}
	if n := len(gw.received()); n != 0 {
		t.Errorf("%d requests reached the gateway", n)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.n != 0 {
		t.Errorf("%d tokens minted", ms.n)
	}
}

func TestMintFailureIsAnthropicAuthError(t *testing.T) {
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, newMintServer(t, "conv-foreign"))
	req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-foreign")+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", s.Capability("conv-foreign"))
	resp, body := roundtrip.Do(t, req)
	checkAnthropicError(t, resp, body, http.StatusUnauthorized, "authentication_error")
	if n := len(gw.received()); n != 0 {
		t.Errorf("%d requests reached the gateway", n)
	}
}

func TestGatewayUnreachable(t *testing.T) {
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, newMintServer(t))
	gw.srv.Close()
	req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-1")+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", s.Capability("conv-1"))
	resp, body := roundtrip.Do(t, req)
	checkAnthropicError(t, resp, body, http.StatusBadGateway, "api_error")
}

// The proxy logs to the Logger of its Options: an upstream failure with
// its conversation, never the credential.
func TestLogsToItsLogger(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	gw := newGateway(t, nil)
	s := startProxyWith(t, gw.srv.URL, newMintServer(t), &Options{Logger: logger})
	gw.srv.Close()
	req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-1")+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", s.Capability("conv-1"))
	resp, body := roundtrip.Do(t, req)
	checkAnthropicError(t, resp, body, http.StatusBadGateway, "api_error")
	mu.Lock()
	defer mu.Unlock()
	l := logs.String()
	if !strings.Contains(l, "upstream call failed") || !strings.Contains(l, "conversation=conv-1") {
		t.Errorf("the upstream failure is not logged with its conversation:\n%s", l)
	}
	if strings.Contains(l, s.Capability("conv-1")) || strings.Contains(l, "wt-conv-1") {
		t.Errorf("a credential reached the log:\n%s", l)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestNewNeedsGatewayAndMinter(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:9" + gatewayPath)
	minter := minting.New("http://127.0.0.1:9", func() (string, error) { return "", nil }, nil)
	for name, call := range map[string]func(){
		"no gateway URL": func() { New(nil, minter, nil) },
		"no minter":      func() { New(u, nil, &Options{}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New did not panic")
				}
			}()
			call()
		})
	}
}

func TestBaseURLFor(t *testing.T) {
	s := startProxy(t, newGateway(t, nil).srv.URL, newMintServer(t))
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Errorf("URL %q is not on loopback", s.URL())
	}
	if got, want := s.BaseURLFor("conv-9"), s.URL()+"/conv-9"; got != want {
		t.Errorf("BaseURLFor = %q, want %q", got, want)
	}
}

// TestAnthropicSDKThroughProxy drives the proxy with the official SDK, as a
// subprocess harness would with ANTHROPIC_BASE_URL=BaseURLFor(conv), against
// a gateway that accepts only the token minted for conv and forwards to the
// simulator with the real key.
func TestAnthropicSDKThroughProxy(t *testing.T) {
	const simKey = "sk-ant-upstream"
	sim := anthropicsim.New(simKey, nil)
	ms := newMintServer(t)
	gw := newGateway(t, func(w http.ResponseWriter, r *http.Request) {
		toks := ms.tokens(r.Header.Get(minting.ConversationHeader))
		if len(toks) == 0 || r.Header.Get(minting.TokenHeader) != toks[len(toks)-1] {
			http.Error(w, `{"type":"error","error":{"type":"authentication_error","message":"bad token"}}`, http.StatusUnauthorized)
			return
		}
		r.URL.Path = strings.TrimPrefix(r.URL.Path, gatewayPath)
		r.Header.Del(minting.TokenHeader)
		r.Header.Set("X-Api-Key", simKey)
		sim.ServeHTTP(w, r)
	})
	s := startProxy(t, gw.srv.URL, ms)

	client := anthropic.NewClient(option.WithBaseURL(s.BaseURLFor("conv-sdk")), option.WithAuthToken(s.Capability("conv-sdk")), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
		Model:     "claude-sim",
		MaxTokens: 100,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello proxy"))},
	})
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(msg.Content) != 1 || !strings.Contains(msg.Content[0].Text, "you said: hello proxy") {
		t.Errorf("reply %+v", msg.Content)
	}
}

func TestCapabilityIsPerConversation(t *testing.T) {
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, ms)
	tests := map[string]struct {
		header, value string
		want          int
	}{
		"none":                          {"", "", http.StatusUnauthorized},
		"inert placeholder":             {"Authorization", "Bearer inert", http.StatusUnauthorized},
		"another conversation's":        {"X-Api-Key", s.Capability("conv-b"), http.StatusUnauthorized},
		"another proxy's":               {"X-Api-Key", startProxy(t, gw.srv.URL, ms).Capability("conv-a"), http.StatusUnauthorized},
		"own, as bearer":                {"Authorization", "Bearer " + s.Capability("conv-a"), http.StatusOK},
		"own, as x-api-key":             {"X-Api-Key", s.Capability("conv-a"), http.StatusOK},
		"own, lower-case bearer scheme": {"Authorization", "bearer " + s.Capability("conv-a"), http.StatusOK},
	}
	for name, tc := range tests {
		req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-a")+"/v1/messages", strings.NewReader("{}"))
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		if resp, body := roundtrip.Do(t, req); resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, tc.want, body)
		}
	}
	if toks := ms.tokens("conv-b"); len(toks) != 0 {
		t.Errorf("minted for conv-b with a refused request: %v", toks)
	}
	// A rebound host name does not reach the proxy either.
	req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-a")+"/v1/messages", strings.NewReader("{}"))
	req.Host = "evil.example"
	req.Header.Set("X-Api-Key", s.Capability("conv-a"))
	if resp, _ := roundtrip.Do(t, req); resp.StatusCode != http.StatusForbidden {
		t.Errorf("non-loopback Host: status %d", resp.StatusCode)
	}
}

// TestServesOnAUnixSocket: a sandbox in a network namespace of its own
// reaches the proxy through its unix socket, with the same checks.
func TestServesOnAUnixSocket(t *testing.T) {
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, ms)
	sock := filepath.Join(t.TempDir(), "lp.sock")
	if err := s.ServeUnix(sock); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for cap, want := range map[string]int{s.Capability("conv-a"): http.StatusOK, s.Capability("conv-b"): http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(s.Port())+"/conv-a/v1/messages", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer "+cap)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("over the socket: status %d, want %d", resp.StatusCode, want)
		}
	}
}

// TestMCPRoute: /<id>/mcp/... goes to the MCP handler, and only past the
// proxy's checks; nothing of it reaches the gateway or mints a token.
func TestMCPRoute(t *testing.T) {
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	var mu sync.Mutex
	var paths []string
	s := startProxyWith(t, gw.srv.URL, ms, &Options{MCP: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, "mcp")
	})})
	tests := map[string]struct {
		path, auth, host string
		want             int
	}{
		"own capability":                  {"/conv-a/mcp/talkide-build", "Bearer " + s.Capability("conv-a"), "", http.StatusOK},
		"no capability":                   {"/conv-a/mcp/talkide-build", "", "", http.StatusUnauthorized},
		"another conversation's":          {"/conv-a/mcp/talkide-build", "Bearer " + s.Capability("conv-b"), "", http.StatusUnauthorized},
		"dot dot after mcp":               {"/conv-a/mcp/../../conv-b/mcp/x", "Bearer " + s.Capability("conv-a"), "", http.StatusBadRequest},
		"bad id":                          {"/conv%2Fa/mcp/talkide-build", "Bearer " + s.Capability("conv/a"), "", http.StatusBadRequest},
		"rebound host":                    {"/conv-a/mcp/talkide-build", "Bearer " + s.Capability("conv-a"), "evil.example", http.StatusForbidden},
		"a path merely starting with mcp": {"/conv-a/mcpx", "Bearer " + s.Capability("conv-a"), "", http.StatusOK},
	}
	for name, tc := range tests {
		req, _ := http.NewRequest(http.MethodPost, s.URL()+tc.path, strings.NewReader("{}"))
		req.URL.RawPath = tc.path
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		if resp, body := roundtrip.Do(t, req); resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, tc.want, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/conv-a/mcp/talkide-build" {
		t.Errorf("the MCP handler saw %v, want the one good request", paths)
	}
	// Only "/mcpx" went on to the gateway, as a model call would.
	if got := gw.received(); len(got) != 1 || got[0].Path != gatewayPath+"/mcpx" {
		t.Errorf("the gateway received %+v", got)
	}
}
