package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// waitLimit bounds every wait for something the gateway must do, so that a
// broken gateway fails a test instead of hanging it. It is never slept.
const waitLimit = 10 * time.Second

const testAPIKey = "sk-ant-api03-gateway-test-KEY-0123456789"

// fakeStore is an in-memory Store. Every recorded usage is also sent on
// recorded, while its buffer has room: RecordUsages blocks only in onRecord.
type fakeStore struct {
	recorded chan store.UsageRecord

	mu      sync.Mutex
	convs   map[string]store.Conversation // guarded by mu
	usage   []store.UsageRecord           // guarded by mu
	batches []int                         // guarded by mu; the size of each batch stored
	getErr  error                         // guarded by mu; returned by GetConversation when set
	// onRecord, when set, runs first in every RecordUsages; an error it
	// returns fails the write.
	onRecord func(ctx context.Context, us []store.UsageRecord) error // guarded by mu
}

func newFakeStore(convs ...store.Conversation) *fakeStore {
	s := &fakeStore{recorded: make(chan store.UsageRecord, 64), convs: make(map[string]store.Conversation)}
	for _, c := range convs {
		s.convs[c.ID] = c
	}
	return s
}

func (s *fakeStore) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getErr != nil {
		return store.Conversation{}, s.getErr
	}
	c, ok := s.convs[id]
	if !ok {
		return store.Conversation{}, fmt.Errorf("conversation %s: %w", id, store.ErrNotFound)
	}
	return c, nil
}

func (s *fakeStore) RecordUsages(ctx context.Context, us []store.UsageRecord) error {
	s.mu.Lock()
	hook := s.onRecord
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, us); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.usage = append(s.usage, us...)
	s.batches = append(s.batches, len(us))
	s.mu.Unlock()
	for _, u := range us {
		select {
		case s.recorded <- u:
		default: // nobody is counting (a benchmark)
		}
	}
	return nil
}

// setOnRecord sets the store's onRecord hook.
func (s *fakeStore) setOnRecord(f func(ctx context.Context, us []store.UsageRecord) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRecord = f
}

// batchSizes returns the size of each batch stored so far.
func (s *fakeStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}

func (s *fakeStore) records() []store.UsageRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]store.UsageRecord(nil), s.usage...)
}

var (
	convA = store.Conversation{ID: "conv-a", Tenant: "acme", Env: "prod", UserID: "user-1"}
	convB = store.Conversation{ID: "conv-b", Tenant: "acme", Env: "prod", UserID: "user-2"}
	convC = store.Conversation{ID: "conv-c", Tenant: "globex", Env: "dev", UserID: "user-3"}
)

// harness is a gateway in front of an upstream, both on loopback.
type harness struct {
	keys   *trust.Keyring
	store  *fakeStore
	gw     *Gateway
	url    string        // the gateway's base URL, with Prefix
	served chan struct{} // receives once each gateway ServeHTTP has returned
	// gone receives when a request's context ends before its ServeHTTP has
	// returned: its client went away.
	gone chan struct{}
}

func newHarness(t testing.TB, upstream http.Handler, opts *Options) *harness {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	return newHarnessURL(t, up.URL, opts)
}

func newHarnessURL(t testing.TB, upstream string, opts *Options) *harness {
	t.Helper()
	return newHarnessSetup(t, upstream, opts, nil)
}

// newHarnessSetup is newHarnessURL with setup, when not nil, run on the
// gateway before it serves.
func newHarnessSetup(t testing.TB, upstream string, opts *Options, setup func(*Gateway)) *harness {
	t.Helper()
	keys, err := trust.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{keys: keys, store: newFakeStore(convA, convB, convC), served: make(chan struct{}, 64), gone: make(chan struct{}, 64)}
	h.gw = New(u, testAPIKey, keys, h.store, opts)
	if setup != nil {
		setup(h.gw)
	}
	// Registered before the server's cleanup, so run after it. Bounded, so
	// that a test that failed with a store write held does not hang.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := h.gw.Close(ctx); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
	})
	// As the control-plane serves it: on net/http's server, through
	// ServeHTTP.
	counted := func(gw http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			returned := make(chan struct{})
			defer close(returned)
			go func() {
				select {
				case <-r.Context().Done():
					select {
					case <-returned:
					default:
						select {
						case h.gone <- struct{}{}:
						default:
						}
					}
				case <-returned:
				}
			}()
			defer func() {
				select {
				case h.served <- struct{}{}:
				default: // nobody is counting (a benchmark)
				}
			}()
			gw.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewUnstartedServer(counted(h.gw))
	// Its connections as the control-plane's server has them: raw from
	// the first call the gateway authorises on them.
	srv.Listener = Conns(srv.Listener)
	srv.Config.ConnContext = ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	h.url = srv.URL + Prefix
	return h
}

// mint returns a WorkerToken for c.
func (h *harness) mint(c store.Conversation) string {
	tok, _ := h.keys.MintWorkerToken(c.Tenant, c.Env, c.ID, time.Now())
	return tok
}

// post sends body to the gateway at path (below Prefix) with headers.
func (h *harness) post(t *testing.T, path string, hdr http.Header, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// flush waits until the gateway has written the usage records of the
// calls that ended so far, and logged them.
func (h *harness) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := h.gw.Flush(ctx); err != nil {
		t.Fatalf("gateway Flush: %v", err)
	}
}

// waitServed waits until the gateway has finished one request.
func (h *harness) waitServed(t *testing.T) {
	t.Helper()
	select {
	case <-h.served:
	case <-time.After(waitLimit):
		t.Fatal("gateway never finished the request")
	}
}

func tokenHeader(tok string) http.Header { return http.Header{"X-Worker-Token": {tok}} }

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// decodeError parses an Anthropic error body and returns its error type.
func decodeError(t *testing.T, body string) string {
	t.Helper()
	var e anthropicError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not an Anthropic error body (%v): %s", err, body)
	}
	return e.Error.Type
}

// The canned upstream conversation.
const (
	testModel   = "claude-test-1"
	requestBody = `{"model":"claude-req-model","max_tokens":64,"messages":[{"role":"user","content":"Hi \u00e9 \n"}]}`
	streamBody  = `{"model":"claude-req-model","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`
)

var (
	cannedJSON = `{"id":"msg_01","type":"message","role":"assistant","model":"` + testModel + `",` +
		`"content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":12,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":6}}`
	cannedJSONUsage = usage{Model: testModel, InputTokens: 12, OutputTokens: 6, CacheCreationInputTokens: 3, CacheReadInputTokens: 4}

	cannedEvents = []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_02\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"" + testModel + "\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":200,\"output_tokens\":1}}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		"event: ping\ndata: {\"type\": \"ping\"}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n",
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
	cannedStream      = strings.Join(cannedEvents, "")
	cannedStartUsage  = usage{Model: testModel, InputTokens: 25, OutputTokens: 1, CacheCreationInputTokens: 100, CacheReadInputTokens: 200}
	cannedStreamUsage = usage{Model: testModel, InputTokens: 25, OutputTokens: 15, CacheCreationInputTokens: 100, CacheReadInputTokens: 200}
)

// countedAnthropic is fakeAnthropic with a channel that gets a value for
// each request it answers, with room for n.
func countedAnthropic(n int) (http.Handler, chan struct{}) {
	hits := make(chan struct{}, n)
	up := fakeAnthropic()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- struct{}{}
		up.ServeHTTP(w, r)
	}), hits
}

// fakeAnthropic is a small Anthropic-shaped upstream: it checks the key and
// answers /v1/messages (streamed or not) and /v1/messages/count_tokens with
// the canned responses.
func fakeAnthropic() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != testAPIKey {
			writeError(w, http.StatusUnauthorized, errAuthentication, "invalid x-api-key")
			return
		}
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" {
			writeError(w, http.StatusBadRequest, errInvalidRequest, "bad body")
			return
		}
		switch {
		case r.Method != http.MethodPost:
			writeError(w, http.StatusMethodNotAllowed, errInvalidRequest, "method")
		case r.URL.Path == "/v1/messages/count_tokens":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"input_tokens":42}`)
		case r.URL.Path != "/v1/messages":
			writeError(w, http.StatusNotFound, errNotFound, "path")
		case req.Stream:
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			for _, ev := range cannedEvents {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_upstream_1")
			io.WriteString(w, cannedJSON)
		}
	})
}

// flip returns s with the character at i replaced by another base64url one.
func flip(s string, i int) string {
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}

func TestSecurity(t *testing.T) {
	up, hits := countedAnthropic(64)
	h := newHarness(t, up, nil)

	good := h.mint(convA)
	parts := strings.Split(good, ".")
	tamperedPayload := strings.Join([]string{parts[0], parts[1], flip(parts[2], len(parts[2])/2), parts[3]}, ".")
	tamperedMAC := strings.Join([]string{parts[0], parts[1], parts[2], flip(parts[3], 5)}, ".")
	expired, _ := h.keys.MintWorkerToken(convA.Tenant, convA.Env, convA.ID, time.Now().Add(-3*time.Minute))
	otherRing, err := trust.NewKeyring("k9", map[string][]byte{"k9": bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	unknownKey, _ := otherRing.MintWorkerToken(convA.Tenant, convA.Env, convA.ID, time.Now())
	// A token for tenant-env globex/dev naming a conversation of acme/prod.
	wrongEnv, _ := h.keys.MintWorkerToken(convC.Tenant, convC.Env, convA.ID, time.Now())
	missing, _ := h.keys.MintWorkerToken(convA.Tenant, convA.Env, "conv-gone", time.Now())

	tests := map[string]struct {
		hdr      http.Header
		status   int
		errType  string
		secrets  []string // must not appear in the response
		forwards bool
	}{
		"no token":                   {hdr: http.Header{}, status: 401, errType: errAuthentication},
		"basic authorization":        {hdr: http.Header{"Authorization": {"Basic " + good}}, status: 401, errType: errAuthentication, secrets: []string{good}},
		"empty bearer":               {hdr: http.Header{"Authorization": {"Bearer "}}, status: 401, errType: errAuthentication},
		"malformed":                  {hdr: tokenHeader("not-a-token"), status: 401, errType: errAuthentication, secrets: []string{"not-a-token"}},
		"malformed bearer":           {hdr: http.Header{"Authorization": {"Bearer wt1.k1.x"}}, status: 401, errType: errAuthentication},
		"tampered payload":           {hdr: tokenHeader(tamperedPayload), status: 401, errType: errAuthentication, secrets: []string{tamperedPayload, parts[3]}},
		"tampered mac":               {hdr: tokenHeader(tamperedMAC), status: 401, errType: errAuthentication, secrets: []string{tamperedMAC, parts[2]}},
		"tampered mac as bearer":     {hdr: http.Header{"Authorization": {"Bearer " + tamperedMAC}}, status: 401, errType: errAuthentication, secrets: []string{tamperedMAC}},
		"expired":                    {hdr: tokenHeader(expired), status: 401, errType: errAuthentication, secrets: []string{expired}},
		"unknown key id":             {hdr: tokenHeader(unknownKey), status: 401, errType: errAuthentication, secrets: []string{unknownKey}},
		"token for another conv":     {hdr: http.Header{"X-Worker-Token": {good}, ConversationHeader: {convB.ID}}, status: 403, errType: errPermission, secrets: []string{good}},
		"token of another tenantenv": {hdr: tokenHeader(wrongEnv), status: 403, errType: errPermission, secrets: []string{wrongEnv}},
		"conversation missing":       {hdr: tokenHeader(missing), status: 403, errType: errPermission, secrets: []string{missing}},
		"bad conversation header":    {hdr: http.Header{"X-Worker-Token": {good}, ConversationHeader: {"../x"}}, status: 400, errType: errInvalidRequest, secrets: []string{good}},
		"two conversation headers":   {hdr: http.Header{"X-Worker-Token": {good}, ConversationHeader: {convA.ID, convA.ID}}, status: 400, errType: errInvalidRequest},

		"worker token header":    {hdr: tokenHeader(good), status: 200, forwards: true},
		"bearer":                 {hdr: http.Header{"Authorization": {"bearer " + good}}, status: 200, forwards: true},
		"matching conversation":  {hdr: http.Header{"Authorization": {"Bearer " + good}, ConversationHeader: {convA.ID}}, status: 200, forwards: true},
		"header wins over basic": {hdr: http.Header{"X-Worker-Token": {good}, "Authorization": {"Basic Zm9vOmJhcg=="}}, status: 200, forwards: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp := h.post(t, "/v1/messages", tc.hdr, requestBody)
			body := readAll(t, resp.Body)
			h.waitServed(t)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			for _, s := range append(tc.secrets, testAPIKey) {
				if strings.Contains(body, s) || strings.Contains(fmt.Sprint(resp.Header), s) {
					t.Errorf("response contains a secret %.12q…: %s", s, body)
				}
			}
			select {
			case <-hits:
				if !tc.forwards {
					t.Fatal("a refused request reached the upstream")
				}
			default:
				if tc.forwards {
					t.Fatal("the request did not reach the upstream")
				}
			}
			if tc.forwards {
				if body != cannedJSON {
					t.Errorf("body = %s, want the upstream's", body)
				}
				return
			}
			if got := decodeError(t, body); got != tc.errType {
				t.Errorf("error type = %q, want %q", got, tc.errType)
			}
		})
	}
	// Refused requests are not model calls: only the forwarded ones count.
	var forwarded int
	for _, tc := range tests {
		if tc.forwards {
			forwarded++
		}
	}
	h.flush(t)
	if got := len(h.store.records()); got != forwarded {
		t.Errorf("%d usage records, want %d", got, forwarded)
	}
}

func TestRouting(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), &Options{MaxBody: 1024})
	tok := h.mint(convA)
	tests := map[string]struct {
		method, path string
		body         io.Reader
		status       int
		errType      string
	}{
		"messages":          {method: "POST", path: Prefix + "/v1/messages", body: strings.NewReader(requestBody), status: 200},
		"count tokens":      {method: "POST", path: Prefix + "/v1/messages/count_tokens", body: strings.NewReader(requestBody), status: 200},
		"query dropped":     {method: "POST", path: Prefix + "/v1/messages?beta=true", body: strings.NewReader(requestBody), status: 200},
		"get":               {method: "GET", path: Prefix + "/v1/messages", status: 405, errType: errInvalidRequest},
		"put":               {method: "PUT", path: Prefix + "/v1/messages", body: strings.NewReader(requestBody), status: 405, errType: errInvalidRequest},
		"models":            {method: "POST", path: Prefix + "/v1/models", body: strings.NewReader(requestBody), status: 404, errType: errNotFound},
		"trailing slash":    {method: "POST", path: Prefix + "/v1/messages/", body: strings.NewReader(requestBody), status: 404, errType: errNotFound},
		"batches":           {method: "POST", path: Prefix + "/v1/messages/batches", body: strings.NewReader(requestBody), status: 404, errType: errNotFound},
		"no prefix":         {method: "POST", path: "/v1/messages", body: strings.NewReader(requestBody), status: 404, errType: errNotFound},
		"prefix only":       {method: "POST", path: Prefix, body: strings.NewReader(requestBody), status: 404, errType: errNotFound},
		"dot dot":           {method: "POST", path: Prefix + "/v1/messages/../messages", body: strings.NewReader(requestBody), status: 400, errType: errInvalidRequest},
		"dot":               {method: "POST", path: Prefix + "/v1/./messages", body: strings.NewReader(requestBody), status: 400, errType: errInvalidRequest},
		"double slash":      {method: "POST", path: Prefix + "//v1/messages", body: strings.NewReader(requestBody), status: 400, errType: errInvalidRequest},
		"escaped dot dot":   {method: "POST", path: Prefix + "/v1/%2E%2E/v1/messages", body: strings.NewReader(requestBody), status: 404, errType: errNotFound},
		"too large":         {method: "POST", path: Prefix + "/v1/messages", body: strings.NewReader(strings.Repeat("x", 2048)), status: 413, errType: errTooLarge},
		"too large chunked": {method: "POST", path: Prefix + "/v1/messages", body: io.MultiReader(strings.NewReader(strings.Repeat("x", 2048))), status: 413, errType: errTooLarge},
		"at limit":          {method: "POST", path: Prefix + "/v1/messages", body: strings.NewReader(requestBody + strings.Repeat(" ", 1024-len(requestBody))), status: 200},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base := strings.TrimSuffix(h.url, Prefix)
			req, err := http.NewRequest(tc.method, base+tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Worker-Token", tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			h.waitServed(t)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if tc.errType != "" {
				if got := decodeError(t, body); got != tc.errType {
					t.Errorf("error type = %q, want %q", got, tc.errType)
				}
			}
			if tc.status == 405 && resp.Header.Get("Allow") != "POST" {
				t.Errorf("Allow = %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
}

func TestStoreFailure(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	h.store.mu.Lock()
	h.store.getErr = fmt.Errorf("database is locked")
	h.store.mu.Unlock()
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
	body := readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != 500 || decodeError(t, body) != errAPI || strings.Contains(body, "database") {
		t.Errorf("got %d %s, want 500 api_error without the cause", resp.StatusCode, body)
	}
}

// TestUpstreamRequest checks what the upstream receives: no client
// credential, the real key, no query, the body unchanged.
func TestUpstreamRequest(t *testing.T) {
	type seen struct {
		method, path, rawQuery, host string
		header                       http.Header
		body                         []byte
	}
	got := make(chan seen, 1)
	var upstreamHost string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), b}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, cannedJSON)
	}))
	defer up.Close()
	upstreamHost = strings.TrimPrefix(up.URL, "http://")

	// An upstream base URL with a path of its own, as a simulator might have.
	h := newHarnessURL(t, up.URL+"/sim/", nil)
	tok := h.mint(convA)
	tests := map[string]struct {
		hdr         http.Header
		wantVersion string
	}{
		"worker token header": {
			hdr: http.Header{
				"X-Worker-Token":         {tok},
				"Authorization":          {"Bearer client-bearer-secret"},
				"Proxy-Authorization":    {"Basic cHJveHk6c2VjcmV0"},
				"X-Api-Key":              {"client-api-key-secret"},
				"Cookie":                 {"session=client-cookie-secret"},
				ConversationHeader:       {convA.ID},
				"X-Talkide-Debug":        {"talkide-debug-secret"},
				"X-Talkide-Identity":     {"talkide-identity-secret"},
				"Anthropic-Beta":         {"prompt-caching-2024-07-31"},
				"Anthropic-Version":      {"2024-01-01"},
				"Accept":                 {"application/json"},
				"User-Agent":             {"claude-cli/2.0 (external, cli)"},
				"X-Stainless-Lang":       {"js"},
				"X-Forwarded-For":        {"10.9.9.9"},
				"Connection":             {"X-Hop-Secret"},
				"X-Hop-Secret":           {"hop-secret"},
				"Accept-Encoding":        {"br"},
				"Anthropic-Dangerous-Ok": {"true"},
			},
			wantVersion: "2024-01-01",
		},
		"bearer only": {
			hdr:         http.Header{"Authorization": {"Bearer " + tok}, "Cookie": {"a=b"}},
			wantVersion: anthropicVersion,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, h.url+"/v1/messages?beta=true&x=1", strings.NewReader(requestBody))
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range tc.hdr {
				req.Header[k] = vs
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			h.waitServed(t)
			if resp.StatusCode != 200 || body != cannedJSON {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
			s := <-got
			if s.method != "POST" || s.path != "/sim/v1/messages" || s.rawQuery != "" || s.host != upstreamHost {
				t.Errorf("upstream saw %s %s?%s host %s, want POST /sim/v1/messages, no query, host %s", s.method, s.path, s.rawQuery, s.host, upstreamHost)
			}
			if diff := cmp.Diff([]byte(requestBody), s.body); diff != "" {
				t.Errorf("body changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{testAPIKey}, s.header["X-Api-Key"]); diff != "" {
				t.Errorf("x-api-key (-want +got):\n%s", diff)
			}
			if v := s.header.Get("Anthropic-Version"); v != tc.wantVersion {
				t.Errorf("anthropic-version = %q, want %q", v, tc.wantVersion)
			}
			for k, vs := range s.header {
				lk := strings.ToLower(k)
				if deniedHeaders[lk] && lk != "x-api-key" && lk != "accept-encoding" || strings.HasPrefix(lk, "x-talkide-") ||
					lk == "x-worker-token" || lk == "x-hop-secret" || lk == "x-forwarded-for" {
					t.Errorf("upstream received %s", k)
				}
				for _, v := range vs {
					if strings.Contains(v, "secret") || strings.Contains(v, tok) {
						t.Errorf("upstream received a client secret in %s", k)
					}
				}
			}
			if v := s.header.Get("Accept-Encoding"); v == "br" {
				t.Errorf("client's Accept-Encoding was forwarded: the gateway could not read the response")
			}
			for k, want := range tc.hdr {
				switch strings.ToLower(k) {
				case "anthropic-beta", "accept", "user-agent", "x-stainless-lang", "anthropic-dangerous-ok":
					if diff := cmp.Diff(want, s.header[k]); diff != "" {
						t.Errorf("%s not kept (-want +got):\n%s", k, diff)
					}
				}
			}
		})
	}
}

// recordFor waits for the next usage record.
func (h *harness) recordFor(t *testing.T) store.UsageRecord {
	t.Helper()
	select {
	case r := <-h.store.recorded:
		return r
	case <-time.After(waitLimit):
		t.Fatal("no usage recorded")
		panic("unreachable")
	}
}

// checkRecord compares a record with want, ignoring the fields that vary.
func checkRecord(t *testing.T, want, got store.UsageRecord) {
	t.Helper()
	if !strings.HasPrefix(got.ID, "gw_") || len(got.ID) < 20 {
		t.Errorf("record id %q is not a gateway id", got.ID)
	}
	if got.StartedAt.IsZero() || got.Duration < 0 || time.Since(got.StartedAt) > time.Minute {
		t.Errorf("record times: started %v, duration %v", got.StartedAt, got.Duration)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.UsageRecord{}, "ID", "StartedAt", "Duration")); diff != "" {
		t.Errorf("usage record (-want +got):\n%s", diff)
	}
}

// recordOf is the record expected for a call of conversation c.
func recordOf(c store.Conversation, status int, streamed bool, u usage) store.UsageRecord {
	return store.UsageRecord{
		Tenant: c.Tenant, Env: c.Env, ConversationID: c.ID, UserID: c.UserID,
		Model: u.Model, Status: status, Streamed: streamed,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens,
	}
}
