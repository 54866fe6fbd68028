package minting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fakeclock"
)

// mintCall is what the fake mint endpoint received.
type mintCall struct {
	Authorization  string
	ConversationID string
}

// mintServer is a fake control-plane mint endpoint. It issues
// "tok-<conversation>-<n>" valid for ttl from the clock, or answers with
// fail when fail is set.
type mintServer struct {
	srv   *httptest.Server
	clock *fakeclock.Clock
	ttl   time.Duration

	mu    sync.Mutex
	calls []mintCall                                   // guarded by mu
	fail  func(w http.ResponseWriter, r *http.Request) // guarded by mu
}

func newMintServer(t *testing.T, c *fakeclock.Clock) *mintServer {
	t.Helper()
	m := &mintServer{clock: c, ttl: 120 * time.Second}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mintServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != MintPath {
		http.Error(w, "wrong endpoint", http.StatusNotFound)
		return
	}
	var req contract.MintRequest
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.calls = append(m.calls, mintCall{Authorization: r.Header.Get("Authorization"), ConversationID: req.ConversationID})
	n := len(m.calls)
	fail := m.fail
	m.mu.Unlock()
	if fail != nil {
		fail(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(contract.MintResponse{
		Token:     fmt.Sprintf("tok-%s-%d", req.ConversationID, n),
		ExpiresAt: m.clock.Now().Add(m.ttl),
		KeyID:     "k1",
	})
}

func (m *mintServer) Calls() []mintCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]mintCall(nil), m.calls...)
}

func (m *mintServer) setFail(f func(w http.ResponseWriter, r *http.Request)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = f
}

func staticIdentity(tok string) func() (string, error) {
	return func() (string, error) { return tok, nil }
}

func TestTokenCachesUntilRefresh(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ttl := 120 * time.Second
	// Each step sets the clock to t0+at and asks for a token; the cache
	// holds a token until refreshBefore its expiry.
	steps := []struct {
		at        time.Duration
		conv      string
		wantToken string
	}{
		{0, "c1", "tok-c1-1"},
		{time.Second, "c1", "tok-c1-1"},
		{0, "c2", "tok-c2-2"}, // per conversation
		{ttl - refreshBefore - time.Second, "c1", "tok-c1-1"},
		{ttl - refreshBefore, "c1", "tok-c1-3"}, // too close to expiry
		{ttl - refreshBefore + time.Second, "c1", "tok-c1-3"},
		{2*ttl - 2*refreshBefore, "c1", "tok-c1-4"},
		{10 * ttl, "c2", "tok-c2-5"}, // long expired
	}
	c := fakeclock.New(t0)
	ms := newMintServer(t, c)
	m := New(ms.srv.URL+"/", staticIdentity("tki_id.secret"), &Options{Now: c.Now})
	for i, s := range steps {
		c.Set(t0.Add(s.at))
		got, err := m.Token(context.Background(), s.conv)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != s.wantToken {
			t.Errorf("step %d (t0+%v, %s): token %q, want %q", i, s.at, s.conv, got, s.wantToken)
		}
	}
	if n := len(ms.Calls()); n != 5 {
		t.Errorf("%d mint calls, want 5", n)
	}
}

func TestIdentityReadPerMint(t *testing.T) {
	c := fakeclock.New(time.Unix(1_900_000_000, 0))
	ms := newMintServer(t, c)
	var mu sync.Mutex
	reads := 0
	identity := func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return fmt.Sprintf("tki_rot.secret%d", reads), nil
	}
	m := New(ms.srv.URL, identity, &Options{Now: c.Now})
	ctx := context.Background()
	for _, conv := range []string{"c1", "c1", "c2", "c3"} {
		if _, err := m.Token(ctx, conv); err != nil {
			t.Fatal(err)
		}
	}
	want := []mintCall{
		{"Bearer tki_rot.secret1", "c1"},
		{"Bearer tki_rot.secret2", "c2"},
		{"Bearer tki_rot.secret3", "c3"},
	}
	if diff := cmp.Diff(want, ms.Calls()); diff != "" {
		t.Errorf("mint calls (-want +got):\n%s", diff)
	}
	if reads != 3 {
		t.Errorf("identity read %d times, want once per mint (3)", reads)
	}
}

func TestMintErrors(t *testing.T) {
	const identity = "tki_secretid.very-secret-identity-material"
	writeJSON := func(status int, v any) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(v)
		}
	}
	tests := map[string]struct {
		fail     func(http.ResponseWriter, *http.Request)
		identity func() (string, error)
		closed   bool // the control-plane is unreachable
		wantText string
	}{
		"refused identity": {
			fail:     writeJSON(http.StatusUnauthorized, contract.Error{Error: contract.ErrorBody{Code: contract.CodeUnauthorized, Message: "the identity token is not valid"}}),
			wantText: "401 unauthorized: the identity token is not valid",
		},
		"foreign conversation": {
			fail:     writeJSON(http.StatusForbidden, contract.Error{Error: contract.ErrorBody{Code: contract.CodeForbidden, Message: "not your conversation"}}),
			wantText: "403 forbidden",
		},
		"server error without JSON": {
			fail:     func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) },
			wantText: "500",
		},
		"malformed answer": {
			fail:     func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{not json") },
			wantText: "malformed",
		},
		"answer without a token": {
			fail:     writeJSON(http.StatusOK, contract.MintResponse{ExpiresAt: time.Now().Add(time.Minute)}),
			wantText: "malformed",
		},
		"identity unreadable": {
			identity: func() (string, error) { return "", errors.New("token file missing") },
			wantText: "token file missing",
		},
		"unreachable": {closed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fakeclock.New(time.Now())
			ms := newMintServer(t, c)
			ms.setFail(tc.fail)
			id := tc.identity
			if id == nil {
				id = staticIdentity(identity)
			}
			if tc.closed {
				ms.srv.Close()
			}
			m := New(ms.srv.URL, id, &Options{Now: c.Now})
			tok, err := m.Token(context.Background(), "conv-1")
			if !errors.Is(err, ErrMint) || tok != "" {
				t.Fatalf("Token = %q, %v; want an ErrMint", tok, err)
			}
			if strings.Contains(err.Error(), identity) || strings.Contains(err.Error(), "very-secret") {
				t.Errorf("error %q reveals the identity token", err)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not say %q", err, tc.wantText)
			}
			// A failure is not cached: the next call mints again.
			if !tc.closed && tc.identity == nil {
				ms.setFail(nil)
				if tok, err := m.Token(context.Background(), "conv-1"); err != nil || tok == "" {
					t.Errorf("after recovery: %q, %v", tok, err)
				}
			}
		})
	}
}

func TestInvalidConversationRefusedWithoutRequest(t *testing.T) {
	c := fakeclock.New(time.Now())
	ms := newMintServer(t, c)
	m := New(ms.srv.URL, staticIdentity("tki_a.b"), &Options{Now: c.Now})
	for _, id := range []string{"", "..", "a/b", "a.b", "-lead", "a b", strings.Repeat("x", contract.MaxIDLen+1)} {
		_, err := m.Token(context.Background(), id)
		if !errors.Is(err, ErrMint) || !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("Token(%q) = %v; want ErrMint and ErrInvalidID", id, err)
		}
	}
	if n := len(ms.Calls()); n != 0 {
		t.Errorf("%d mint calls for invalid ids", n)
	}
}

// seen is a request as the gateway received it.
type seen struct {
	Header http.Header
	Path   string
	Body   string
}

func newGateway(t *testing.T) (*httptest.Server, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{Header: r.Header.Clone(), Path: r.URL.Path, Body: string(b)})
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *trackedBody) Closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func TestTransport(t *testing.T) {
	c := fakeclock.New(time.Now())
	ms := newMintServer(t, c)
	gw, gwSeen := newGateway(t)
	tr := &Transport{Minter: New(ms.srv.URL, staticIdentity("tki_x.y"), &Options{Now: c.Now})}

	credentials := map[string]string{
		"Authorization":       "Bearer sk-ant-leaked",
		"X-Api-Key":           "sk-ant-leaked",
		"Cookie":              "session=leaked",
		"Proxy-Authorization": "Basic leaked",
		TokenHeader:           "forged",
	}
	tests := map[string]struct {
		headerConvs []string // the request's ConversationHeader values
		wantConv    string   // empty: the request must fail
	}{
		"from the header":    {headerConvs: []string{"conv-hdr"}, wantConv: "conv-hdr"},
		"none":               {},
		"empty header":       {headerConvs: []string{""}},
		"invalid header":     {headerConvs: []string{"../etc"}},
		"two conversations":  {headerConvs: []string{"conv-a", "conv-b"}},
		"the same one twice": {headerConvs: []string{"conv-a", "conv-a"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(gwSeen())
			body := &trackedBody{Reader: strings.NewReader(`{"model":"m"}`)}
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, gw.URL+"/v1/messages", body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range credentials {
				req.Header.Set(k, v)
			}
			for _, c := range tc.headerConvs {
				req.Header.Add(ConversationHeader, c)
			}
			orig := req.Header.Clone()

			resp, err := tr.RoundTrip(req)
			if tc.wantConv == "" {
				if !errors.Is(err, ErrMint) {
					t.Fatalf("RoundTrip = %v, want ErrMint", err)
				}
				if !body.Closed() {
					t.Error("the request body was not closed")
				}
				if n := len(gwSeen()); n != before {
					t.Error("a request without a valid conversation reached the gateway")
				}
				return
			}
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			if diff := cmp.Diff(orig, req.Header); diff != "" {
				t.Errorf("RoundTrip modified the caller's request headers (-before +after):\n%s", diff)
			}
			got := gwSeen()[before]
			for k := range credentials {
				if k == TokenHeader {
					continue
				}
				if v := got.Header.Get(k); v != "" {
					t.Errorf("%s reached the gateway: %q", k, v)
				}
			}
			// The token is the one minted (and cached) for the conversation.
			wantTok, err := tr.Minter.Token(context.Background(), tc.wantConv)
			if err != nil || !strings.HasPrefix(wantTok, "tok-"+tc.wantConv+"-") {
				t.Fatalf("minted token %q, %v", wantTok, err)
			}
			if got.Header.Get(TokenHeader) != wantTok {
				t.Errorf("gateway got token %q, want %q", got.Header.Get(TokenHeader), wantTok)
			}
			if v := got.Header.Values(ConversationHeader); len(v) != 1 || v[0] != tc.wantConv {
				t.Errorf("%s = %q, want %q", ConversationHeader, v, tc.wantConv)
			}
			if got.Body != `{"model":"m"}` || got.Path != "/v1/messages" {
				t.Errorf("gateway got %s %q", got.Path, got.Body)
			}
		})
	}
}
