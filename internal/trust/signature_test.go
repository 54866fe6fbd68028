package trust

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/tokenscheme"
)

var master = testKey(0x4d)

// envKeys is the control-plane's KeyLookup: keys derive from master, key id
// "c1", for the tenant-envs that exist.
func envKeys(tenant, env, kid string) ([]byte, bool) {
	known := map[string]bool{"acme/prod": true, "acme/dev": true, "globex/prod": true}
	if kid != "c1" || !known[tenant+"/"+env] {
		return nil, false
	}
	return DeriveEnvKey(master, tenant, env), true
}

// acmeSigner signs as acme/prod towards the worker at the clock's time.
func acmeSigner(c *fakeclock.Clock) *Signer {
	return &Signer{Direction: ToWorker, Tenant: "acme", Env: "prod", KeyID: "c1",
		Key: DeriveEnvKey(master, "acme", "prod"), Now: c.Now}
}

// signedRequest returns a client request for target signed by s over body.
func signedRequest(t testing.TB, s *Signer, method, target string, body []byte) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	s.Sign(r, body)
	return r
}

// signWithNonce is Sign with a chosen nonce and timestamp, to build requests
// that share a nonce.
func signWithNonce(s *Signer, r *http.Request, body []byte, nonce string, ts time.Time) {
	sig := Signature{KeyID: s.KeyID, Tenant: s.Tenant, Env: s.Env, Timestamp: ts.Unix(), Nonce: nonce}
	sig.MAC = mac(s.Key, canonical(s.Direction, sig, r.Method, r.URL.RequestURI(), body))
	r.Header.Set(SignatureHeader, sig.String())
}

func mustParse(t testing.TB, h string) Signature {
	t.Helper()
	s, err := ParseSignature(h)
	if err != nil {
		t.Fatalf("ParseSignature(%q): %v", h, err)
	}
	return s
}

// TestSignVerifyOverHTTP signs client requests, sends them to a real server,
// and verifies them there: what the server sees of method, path, query and
// body must be what the client signed.
func TestSignVerifyOverHTTP(t *testing.T) {
	c := fakeclock.New(t0)
	v := NewVerifier(ToWorker, envKeys, c.Now)
	type result struct {
		p   Principal
		err error
	}
	results := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			results <- result{err: err}
			return
		}
		p, err := v.Verify(r, body)
		results <- result{p, err}
	}))
	defer srv.Close()

	tests := map[string]struct {
		method, target string
		body           []byte
	}{
		"GET with query":        {"GET", "/v1/sessions/c_1/stream?after=5", nil},
		"POST JSON":             {"POST", "/v1/sessions", []byte(`{"conversation_id":"c_1"}`)},
		"POST empty body":       {"POST", "/v1/sessions/c_1/interrupt", nil},
		"root":                  {"GET", "", nil},
		"escaped path":          {"GET", "/v1/sessions/a%2Fb/x%20y", nil},
		"query with escapes":    {"GET", "/v1/x?a=1&b=%20c&a=2&d=%2F", nil},
		"empty query":           {"GET", "/v1/x?", nil},
		"binary body":           {"PUT", "/v1/blob", []byte{0, 1, 2, 0xff, '\n', '\r'}},
		"DELETE":                {"DELETE", "/v1/sessions/c_1", nil},
		"large body":            {"POST", "/v1/sessions/c_1/messages", bytes.Repeat([]byte("x"), 1<<20)},
		"non-ASCII path":        {"GET", "/v1/é", nil},
		"path with semicolons":  {"GET", "/v1/a;b=c", nil},
		"query with semicolons": {"GET", "/v1/a?x=1;y=2", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := signedRequest(t, acmeSigner(c), tc.method, srv.URL+tc.target, tc.body)
			resp, err := srv.Client().Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := <-results
			if got.err != nil {
				t.Fatalf("Verify on the server: %v", got.err)
			}
			if diff := cmp.Diff(Principal{Tenant: "acme", Env: "prod"}, got.p); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSignatureHeaderShape(t *testing.T) {
	c := fakeclock.New(t0)
	r := signedRequest(t, acmeSigner(c), "GET", "http://worker/v1/sessions", nil)
	h := r.Header.Get(SignatureHeader)
	s := mustParse(t, h)
	want := Signature{KeyID: "c1", Tenant: "acme", Env: "prod", Timestamp: t0.Unix(), Nonce: s.Nonce, MAC: s.MAC}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("signature (-want +got):\n%s", diff)
	}
	if len(s.Nonce) < 16 {
		t.Errorf("nonce %q is too short", s.Nonce)
	}
	if got := s.String(); got != h {
		t.Errorf("String() = %q, want the header %q", got, h)
	}
	key := DeriveEnvKey(master, "acme", "prod")
	assertNoSecret(t, h, "", key, master)
}

func TestVerifyRejects(t *testing.T) {
	const target = "http://worker/v1/sessions/c_1/messages?after=3"
	body := []byte(`{"client_message_id":"m_1","text":"hi"}`)

	// Each case returns the request, the body the verifier sees, and the
	// verifier's direction; the verifier's clock is t0.
	type req struct {
		r    *http.Request
		body []byte
		dir  Direction
	}
	sign := func(t *testing.T, mut func(*Signer)) *http.Request {
		c := fakeclock.New(t0)
		s := acmeSigner(c)
		if mut != nil {
			mut(s)
		}
		return signedRequest(t, s, "POST", target, body)
	}
	// signedWith signs the request for the worker with a signer that mut
	// changed.
	signedWith := func(mut func(*Signer)) func(t *testing.T) req {
		return func(t *testing.T) req { return req{sign(t, mut), body, ToWorker} }
	}
	// changed signs the request for the worker, then changes it.
	changed := func(change func(t *testing.T, r *http.Request)) func(t *testing.T) req {
		return func(t *testing.T) req {
			r := sign(t, nil)
			change(t, r)
			return req{r, body, ToWorker}
		}
	}
	// editHeader rewrites one field of a signed request's header.
	editHeader := func(field, val string) func(t *testing.T) req {
		return changed(func(_ *testing.T, r *http.Request) {
			fields := strings.Split(r.Header.Get(SignatureHeader), ";")
			for i, f := range fields {
				if strings.HasPrefix(f, field+"=") {
					fields[i] = field + "=" + val
				}
			}
			r.Header.Set(SignatureHeader, strings.Join(fields, ";"))
		})
	}

	tests := map[string]struct {
		build func(t *testing.T) req
		want  error
	}{
		"missing header":   {changed(func(t *testing.T, r *http.Request) { r.Header.Del(SignatureHeader) }), ErrMalformed},
		"empty header":     {changed(func(t *testing.T, r *http.Request) { r.Header.Set(SignatureHeader, "") }), ErrMalformed},
		"malformed header": {changed(func(t *testing.T, r *http.Request) { r.Header.Set(SignatureHeader, "v1;garbage") }), ErrMalformed},
		"a WorkerToken instead": {changed(func(t *testing.T, r *http.Request) {
			kr := newKeyring(t, "k1", map[string][]byte{"k1": key1})
			tok, _ := kr.MintWorkerToken("acme", "prod", "c_1", t0)
			r.Header.Set(SignatureHeader, tok)
		}), ErrMalformed},
		"wrong key":                 {signedWith(func(s *Signer) { s.Key = testKey(0x01) }), ErrBadSignature},
		"master secret as key":      {signedWith(func(s *Signer) { s.Key = master }), ErrBadSignature},
		"key of another tenant-env": {signedWith(func(s *Signer) { s.Key = DeriveEnvKey(master, "globex", "prod") }), ErrBadSignature},
		"unknown tenant-env":        {signedWith(func(s *Signer) { s.Tenant, s.Key = "initech", DeriveEnvKey(master, "initech", "prod") }), ErrUnknownKey},
		"unknown key id":            {signedWith(func(s *Signer) { s.KeyID = "c2" }), ErrUnknownKey},
		"tenant rewritten":          {editHeader("t", "globex"), ErrBadSignature},
		"env rewritten":             {editHeader("e", "dev"), ErrBadSignature},
		"nonce rewritten":           {editHeader("n", "AAAAAAAAAAAAAAAAAAAAAA"), ErrBadSignature},
		"timestamp rewritten":       {editHeader("ts", strconv.FormatInt(t0.Unix()+1, 10)), ErrBadSignature},
		"mac rewritten":             {editHeader("sig", base64.RawURLEncoding.EncodeToString(make([]byte, 32))), ErrBadSignature},
		"direction mismatch": {func(t *testing.T) req {
			return req{sign(t, nil), body, ToControlPlane}
		}, ErrBadSignature},
		"changed method":        {changed(func(t *testing.T, r *http.Request) { r.Method = "PUT" }), ErrBadSignature},
		"changed path":          {changed(func(t *testing.T, r *http.Request) { r.URL.Path = "/v1/sessions/c_2/messages" }), ErrBadSignature},
		"changed query":         {changed(func(t *testing.T, r *http.Request) { r.URL.RawQuery = "after=0" }), ErrBadSignature},
		"dropped query":         {changed(func(t *testing.T, r *http.Request) { r.URL.RawQuery = "" }), ErrBadSignature},
		"added query parameter": {changed(func(t *testing.T, r *http.Request) { r.URL.RawQuery += "&x=1" }), ErrBadSignature},
		"changed body": {func(t *testing.T) req {
			return req{sign(t, nil), []byte(`{"client_message_id":"m_1","text":"rm -rf /"}`), ToWorker}
		}, ErrBadSignature},
		"dropped body": {func(t *testing.T) req {
			return req{sign(t, nil), nil, ToWorker}
		}, ErrBadSignature},
		"timestamp too old":     {signedWith(func(s *Signer) { s.Now = fakeclock.New(t0.Add(-MaxClockSkew - time.Second)).Now }), ErrExpired},
		"timestamp too new":     {signedWith(func(s *Signer) { s.Now = fakeclock.New(t0.Add(MaxClockSkew + time.Second)).Now }), ErrExpired},
		"timestamp an hour old": {signedWith(func(s *Signer) { s.Now = fakeclock.New(t0.Add(-time.Hour)).Now }), ErrExpired},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := tc.build(t)
			v := NewVerifier(in.dir, envKeys, fakeclock.New(t0).Now)
			h := in.r.Header.Get(SignatureHeader)
			p, err := v.Verify(in.r, in.body)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if p != (Principal{}) {
				t.Errorf("a rejected request returned principal %+v", p)
			}
			assertNoSecret(t, err.Error(), "", master, DeriveEnvKey(master, "acme", "prod"))
			if len(h) >= 8 && strings.Contains(err.Error(), h) {
				t.Errorf("error %q contains the header", err)
			}
		})
	}
}

func TestVerifyClockSkewEdges(t *testing.T) {
	for _, d := range []time.Duration{-MaxClockSkew, -time.Second, 0, time.Second, MaxClockSkew} {
		t.Run(d.String(), func(t *testing.T) {
			r := signedRequest(t, acmeSigner(fakeclock.New(t0.Add(d))), "GET", "http://worker/v1/sessions", nil)
			v := NewVerifier(ToWorker, envKeys, fakeclock.New(t0).Now)
			if _, err := v.Verify(r, nil); err != nil {
				t.Errorf("signature %v from the verifier's clock: %v", d, err)
			}
		})
	}
}

func TestVerifyReplay(t *testing.T) {
	c := fakeclock.New(t0)
	v := NewVerifier(ToWorker, envKeys, c.Now)
	r := signedRequest(t, acmeSigner(c), "POST", "http://worker/v1/sessions", []byte("{}"))
	if _, err := v.Verify(r, []byte("{}")); err != nil {
		t.Fatalf("first Verify: %v", err)
	}
	if _, err := v.Verify(r, []byte("{}")); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: err = %v, want ErrReplayed", err)
	}
	// The same header on a fresh request, later but within the window.
	c.Set(t0.Add(MaxClockSkew))
	again, _ := http.NewRequest("POST", "http://worker/v1/sessions", nil)
	again.Header.Set(SignatureHeader, r.Header.Get(SignatureHeader))
	if _, err := v.Verify(again, []byte("{}")); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay at the edge of the window: err = %v, want ErrReplayed", err)
	}
	// Past the window the timestamp stops it, whether or not the nonce is
	// still remembered.
	c.Set(t0.Add(MaxClockSkew + time.Second))
	if _, err := v.Verify(again, []byte("{}")); !errors.Is(err, ErrExpired) {
		t.Fatalf("replay after the window: err = %v, want ErrExpired", err)
	}
}

func TestReplayAcrossTimestampEdges(t *testing.T) {
	// A signature from the future is valid for up to 2×MaxClockSkew of the
	// verifier's time; its nonce must be remembered that long.
	c := fakeclock.New(t0)
	v := NewVerifier(ToWorker, envKeys, c.Now)
	r := signedRequest(t, acmeSigner(fakeclock.New(t0.Add(MaxClockSkew))), "GET", "http://worker/v1/x", nil)
	if _, err := v.Verify(r, nil); err != nil {
		t.Fatalf("first Verify: %v", err)
	}
	for _, at := range []time.Duration{time.Second, MaxClockSkew, 2*MaxClockSkew - time.Second, 2 * MaxClockSkew} {
		c.Set(t0.Add(at))
		if _, err := v.Verify(r, nil); !errors.Is(err, ErrReplayed) {
			t.Errorf("replay at t0+%v: err = %v, want ErrReplayed", at, err)
		}
	}
	c.Set(t0.Add(2*MaxClockSkew + time.Second))
	if _, err := v.Verify(r, nil); !errors.Is(err, ErrExpired) {
		t.Errorf("replay at t0+2×MaxClockSkew+1s: err = %v, want ErrExpired", err)
	}
}

func TestNonceScopedToTenantEnv(t *testing.T) {
	c := fakeclock.New(t0)
	v := NewVerifier(ToControlPlane, envKeys, c.Now)
	const nonce = "shared-nonce-0123456789"
	signer := func(tenant, env string) *Signer {
		return &Signer{Direction: ToControlPlane, Tenant: tenant, Env: env, KeyID: "c1", Key: DeriveEnvKey(master, tenant, env)}
	}
	for _, te := range [][2]string{{"acme", "prod"}, {"acme", "dev"}, {"globex", "prod"}} {
		r, _ := http.NewRequest("POST", "http://cp/api/internal/worker/reports", nil)
		signWithNonce(signer(te[0], te[1]), r, nil, nonce, t0)
		p, err := v.Verify(r, nil)
		if err != nil {
			t.Fatalf("%s/%s with a nonce used by another tenant-env: %v", te[0], te[1], err)
		}
		if p != (Principal{Tenant: te[0], Env: te[1]}) {
			t.Errorf("principal = %+v, want %s/%s", p, te[0], te[1])
		}
	}
	r, _ := http.NewRequest("POST", "http://cp/api/internal/worker/other", nil)
	signWithNonce(signer("acme", "prod"), r, nil, nonce, t0)
	if _, err := v.Verify(r, nil); !errors.Is(err, ErrReplayed) {
		t.Errorf("same nonce, same tenant-env, other request: err = %v, want ErrReplayed", err)
	}
}

func TestVerifyRecordsNonceOnlyWhenValid(t *testing.T) {
	c := fakeclock.New(t0)
	v := NewVerifier(ToWorker, envKeys, c.Now)
	body := []byte(`{"text":"hello"}`)
	good := signedRequest(t, acmeSigner(c), "POST", "http://worker/v1/sessions/c_1/messages", body)
	h := good.Header.Get(SignatureHeader)

	// An attacker replays the nonce with another body, and with a wrong MAC.
	forged := signedRequest(t, acmeSigner(c), "POST", "http://worker/v1/sessions/c_1/messages", nil)
	forged.Header.Set(SignatureHeader, h)
	if _, err := v.Verify(forged, []byte(`{"text":"evil"}`)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged body: err = %v, want ErrBadSignature", err)
	}
	s := mustParse(t, h)
	s.MAC = make([]byte, 32)
	forged.Header.Set(SignatureHeader, s.String())
	if _, err := v.Verify(forged, body); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged MAC: err = %v, want ErrBadSignature", err)
	}
	// A validly signed but stale request with the same nonce.
	stale, _ := http.NewRequest("POST", "http://worker/v1/sessions/c_1/messages", nil)
	signWithNonce(acmeSigner(c), stale, body, s.Nonce, t0.Add(-2*MaxClockSkew))
	if _, err := v.Verify(stale, body); !errors.Is(err, ErrExpired) {
		t.Fatalf("stale: err = %v, want ErrExpired", err)
	}
	// None of them may have burnt the nonce.
	if _, err := v.Verify(good, body); err != nil {
		t.Fatalf("the genuine request after forgeries with its nonce: %v", err)
	}
}

func TestNonceCacheExpiry(t *testing.T) {
	c := newNonceCache(100)
	if !c.add("a", t0) {
		t.Fatal("first add refused")
	}
	if c.add("a", t0.Add(time.Second)) {
		t.Fatal("duplicate accepted")
	}
	// Still remembered exactly 2×MaxClockSkew later, even though a prune runs.
	if c.add("a", t0.Add(2*MaxClockSkew)) {
		t.Fatal("duplicate accepted at 2×MaxClockSkew")
	}
	// Forgotten at the next prune after that.
	later := t0.Add(2*MaxClockSkew + MaxClockSkew/4 + time.Second)
	if !c.add("b", later) {
		t.Fatal("add b refused")
	}
	c.mu.Lock()
	_, held := c.seen["a"]
	n := len(c.seen)
	c.mu.Unlock()
	if held || n != 1 {
		t.Errorf("after expiry: a held = %v, %d entries; want a gone, 1 entry", held, n)
	}
	if !c.add("a", later) {
		t.Error("expired nonce not accepted again")
	}
}

func TestNonceCacheBounded(t *testing.T) {
	c := newNonceCache(1000)
	for i := range 50 {
		at := t0.Add(time.Duration(i) * time.Minute)
		for j := range 10 {
			if !c.add(fmt.Sprintf("%d-%d", i, j), at) {
				t.Fatalf("add %d-%d refused", i, j)
			}
		}
	}
	c.mu.Lock()
	n := len(c.seen)
	c.mu.Unlock()
	// Only nonces of the last 2×MaxClockSkew (plus one prune period) remain.
	if max := 10 * int((2*MaxClockSkew+MaxClockSkew/4)/time.Minute+2); n > max {
		t.Errorf("%d nonces held, want at most %d", n, max)
	}
}

func TestNonceCacheFailsClosed(t *testing.T) {
	c := newNonceCache(3)
	for _, n := range []string{"a", "b", "c"} {
		if !c.add(n, t0) {
			t.Fatalf("add %s refused", n)
		}
	}
	if c.add("d", t0.Add(time.Second)) {
		t.Fatal("full cache accepted a new nonce")
	}
	if c.add("a", t0.Add(time.Second)) {
		t.Fatal("full cache accepted a duplicate")
	}
	if c.add("d", t0.Add(2*MaxClockSkew)) {
		t.Fatal("full cache accepted a new nonce before its entries expired")
	}
	if !c.add("d", t0.Add(2*MaxClockSkew+time.Second)) {
		t.Fatal("cache still refuses after its entries expired")
	}
	if c.add("d", t0.Add(2*MaxClockSkew+time.Second)) {
		t.Fatal("duplicate accepted after a prune")
	}
}

func TestVerifierFullNonceCacheFailsClosed(t *testing.T) {
	c := fakeclock.New(t0)
	v := NewVerifier(ToWorker, envKeys, c.Now)
	v.nonces["acme/prod"] = newNonceCache(2)
	s := acmeSigner(c)
	for i := range 2 {
		r := signedRequest(t, s, "GET", "http://worker/v1/sessions", nil)
		if _, err := v.Verify(r, nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	r := signedRequest(t, s, "GET", "http://worker/v1/sessions", nil)
	if _, err := v.Verify(r, nil); err == nil {
		t.Fatal("a verifier with a full nonce cache accepted a request")
	}
	// Another tenant-env has a cache of its own and is not blocked.
	other := &Signer{Direction: ToWorker, Tenant: "globex", Env: "prod", KeyID: "c1", Key: DeriveEnvKey(master, "globex", "prod"), Now: c.Now}
	if _, err := v.Verify(signedRequest(t, other, "GET", "http://worker/v1/sessions", nil), nil); err != nil {
		t.Fatalf("another tenant-env was blocked by a full cache: %v", err)
	}
	c.Set(t0.Add(2*MaxClockSkew + time.Second))
	r = signedRequest(t, s, "GET", "http://worker/v1/sessions", nil)
	if _, err := v.Verify(r, nil); err != nil {
		t.Fatalf("after the cache's entries expired: %v", err)
	}
}

func TestDeriveEnvKey(t *testing.T) {
	k := DeriveEnvKey(master, "acme", "prod")
	if len(k) != 32 {
		t.Fatalf("key length %d, want 32", len(k))
	}
	if !bytes.Equal(k, DeriveEnvKey(master, "acme", "prod")) {
		t.Error("DeriveEnvKey is not deterministic")
	}
	if bytes.Equal(k, master) {
		t.Error("derived key equals the master secret")
	}
	others := map[string][]byte{
		"other tenant":           DeriveEnvKey(master, "globex", "prod"),
		"other env":              DeriveEnvKey(master, "acme", "dev"),
		"other master":           DeriveEnvKey(testKey(0x4e), "acme", "prod"),
		"tenant and env swapped": DeriveEnvKey(master, "prod", "acme"),
		"boundary moved":         DeriveEnvKey(master, "acmep", "rod"),
		"joined with a dash":     DeriveEnvKey(master, "acme-prod", ""),
		"empty tenant":           DeriveEnvKey(master, "", "prod"),
		"case differs":           DeriveEnvKey(master, "Acme", "prod"),
	}
	seen := map[string]string{string(k): "acme/prod"}
	for name, o := range others {
		if prev, dup := seen[string(o)]; dup {
			t.Errorf("%s: same key as %s", name, prev)
		}
		seen[string(o)] = name
	}
}

func TestSignerDefaultClock(t *testing.T) {
	s := acmeSigner(fakeclock.New(t0))
	s.Now = nil
	before := time.Now().Unix()
	r := signedRequest(t, s, "GET", "http://worker/v1/sessions", nil)
	after := time.Now().Unix()
	ts := mustParse(t, r.Header.Get(SignatureHeader)).Timestamp
	if ts < before || ts > after {
		t.Errorf("timestamp %d not within [%d, %d]", ts, before, after)
	}
	if _, err := NewVerifier(ToWorker, envKeys, nil).Verify(r, nil); err != nil {
		t.Errorf("Verify with the default clock: %v", err)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	c := fakeclock.New(t0)
	v := NewVerifier(ToWorker, envKeys, c.Now)
	signers := []*Signer{
		acmeSigner(c),
		{Direction: ToWorker, Tenant: "globex", Env: "prod", KeyID: "c1", Key: DeriveEnvKey(master, "globex", "prod"), Now: c.Now},
	}
	const workers, each = 32, 50
	reqs := make([][]*http.Request, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := signers[w%len(signers)] // Signers are shared across goroutines too.
			for i := range each {
				body := []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
				r := signedRequest(t, s, "POST", fmt.Sprintf("http://worker/v1/sessions/c_%d/messages", w), body)
				if _, err := v.Verify(r, body); err != nil {
					t.Errorf("worker %d request %d: %v", w, i, err)
					return
				}
				reqs[w] = append(reqs[w], r)
			}
		})
	}
	wg.Wait()
	// Every one of them is now a replay.
	for w := range workers {
		wg.Go(func() {
			for i, r := range reqs[w] {
				body := []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
				if _, err := v.Verify(r, body); !errors.Is(err, ErrReplayed) {
					t.Errorf("replay of worker %d request %d: err = %v, want ErrReplayed", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestParseSignature(t *testing.T) {
	m := bytes.Repeat([]byte{0xab}, 32)
	sig := base64.RawURLEncoding.EncodeToString(m)
	want := Signature{KeyID: "c1", Tenant: "acme", Env: "prod", Timestamp: 1700000000, Nonce: "n-_0", MAC: m}
	valid := map[string]string{
		"canonical":          "v1;kid=c1;t=acme;e=prod;ts=1700000000;n=n-_0;sig=" + sig,
		"fields reordered":   "v1;sig=" + sig + ";n=n-_0;ts=1700000000;e=prod;t=acme;kid=c1",
		"leading zeros":      "v1;kid=c1;t=acme;e=prod;ts=01700000000;n=n-_0;sig=" + sig,
		"64-char nonce":      "v1;kid=c1;t=acme;e=prod;ts=1700000000;n=" + strings.Repeat("n", 64) + ";sig=" + sig,
		"String of a parsed": want.String(),
		"MaxSignatureLen":    "v1;kid=c1;t=acme;e=prod;ts=" + strings.Repeat("0", MaxSignatureLen-len(want.String())) + "1700000000;n=n-_0;sig=" + sig,
	}
	if h := valid["MaxSignatureLen"]; len(h) != MaxSignatureLen {
		t.Fatalf("test bug: len = %d", len(h))
	}
	for name, h := range valid {
		t.Run("valid/"+name, func(t *testing.T) {
			got := mustParse(t, h)
			w := want
			if name == "64-char nonce" {
				w.Nonce = strings.Repeat("n", 64)
			}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	base := func(kv ...string) string {
		f := map[string]string{"kid": "c1", "t": "acme", "e": "prod", "ts": "1700000000", "n": "n-_0", "sig": sig}
		for i := 0; i+1 < len(kv); i += 2 {
			f[kv[i]] = kv[i+1]
		}
		return "v1;kid=" + f["kid"] + ";t=" + f["t"] + ";e=" + f["e"] + ";ts=" + f["ts"] + ";n=" + f["n"] + ";sig=" + f["sig"]
	}
	good := base()
	malformed := map[string]string{
		"empty":               "",
		"version only":        "v1",
		"wrong version":       "v2" + strings.TrimPrefix(good, "v1"),
		"upper-case version":  "V1" + strings.TrimPrefix(good, "v1"),
		"no version":          strings.TrimPrefix(good, "v1;"),
		"six fields":          strings.TrimSuffix(good, ";sig="+sig),
		"eight fields":        good + ";x=1",
		"trailing semicolon":  good + ";",
		"leading semicolon":   ";" + good,
		"unknown field":       strings.Replace(good, "n=n-_0", "x=n-_0", 1),
		"upper-case field":    strings.Replace(good, "kid=", "KID=", 1),
		"repeated field":      strings.Replace(good, "n=n-_0", "kid=c2", 1),
		"repeated same value": strings.Replace(good, "n=n-_0", "t=acme", 1),
		// With ts or sig missing, only the repeat check notices.
		"repeated field, no ts":  strings.Replace(good, "ts=1700000000", "n=n-_1", 1),
		"repeated field, no sig": strings.Replace(good, "sig="+sig, "kid=c1", 1),
		"field without =":        strings.Replace(good, "n=n-_0", "n", 1),
		"empty value":            base("n", ""),
		"empty key":              strings.Replace(good, "n=n-_0", "=n-_0", 1),
		"space after ;":          strings.Replace(good, ";t=", "; t=", 1),
		"ts not a number":        base("ts", "soon"),
		"ts zero":                base("ts", "0"),
		"ts negative":            base("ts", "-1700000000"),
		"ts fractional":          base("ts", "1700000000.5"),
		"ts hex":                 base("ts", "0x6553f100"),
		"ts overflow":            base("ts", "99999999999999999999"),
		"ts with space":          base("ts", " 1700000000"),
		"mac too short":          base("sig", base64.RawURLEncoding.EncodeToString(m[:31])),
		"mac too long":           base("sig", base64.RawURLEncoding.EncodeToString(append(m, 0))),
		"mac empty-ish":          base("sig", "A"),
		"mac padded":             base("sig", base64.URLEncoding.EncodeToString(m)),
		"mac std alphabet":       base("sig", base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 32))),
		"mac hex":                base("sig", strings.Repeat("ab", 32)),
		"kid with dot":           base("kid", "c.1"),
		"tenant with slash":      base("t", "ac/me"),
		"tenant with space":      base("t", "ac me"),
		"env with =":             base("e", "prod=x"),
		"env non-ASCII":          base("e", "prød"),
		"nonce with colon":       base("n", "n:1"),
		"nonce with NUL":         base("n", "n\x00"),
		"65-char nonce":          base("n", strings.Repeat("n", 65)),
		"65-char tenant":         base("t", strings.Repeat("t", 65)),
		"65-char kid":            base("kid", strings.Repeat("k", 65)),
		"too long":               good + strings.Repeat("x", MaxSignatureLen),
		// Leading zeros are the one way to stretch a valid header.
		"too long, otherwise valid": base("ts", strings.Repeat("0", MaxSignatureLen-len(good)+1)+"1700000000"),
		"whitespace around":         " " + good + " ",
		"commas not semicolon":      strings.ReplaceAll(good, ";", ","),
	}
	for name, h := range malformed {
		t.Run("malformed/"+name, func(t *testing.T) {
			got, err := ParseSignature(h)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if diff := cmp.Diff(Signature{}, got); diff != "" {
				t.Errorf("rejected header returned a signature (-want +got):\n%s", diff)
			}
			if len(h) >= 8 && strings.Contains(err.Error(), h) {
				t.Errorf("error %q contains the header", err)
			}
		})
	}
}

func FuzzParseSignature(f *testing.F) {
	c := fakeclock.New(t0)
	r := signedRequest(f, acmeSigner(c), "GET", "http://worker/v1/sessions", nil)
	f.Add(r.Header.Get(SignatureHeader))
	sig := base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	f.Add("v1;kid=c1;t=acme;e=prod;ts=1700000000;n=abc;sig=" + sig)
	f.Add("v1;sig=" + sig + ";n=abc;ts=+01;e=prod;t=acme;kid=c1")
	f.Add("v1;kid=c1;t=acme;e=prod;ts=1;n=abc;kid=c1")
	f.Add("v1;kid=;t=;e=;ts=;n=;sig=")
	f.Add("v1;;;;;;")
	f.Add("v1;a=b;c=d;e=f;g=h;i=j;k=l")
	f.Add("v1;kid=c1;t=acme;e=prod;ts=9223372036854775807;n=abc;sig=" + sig)
	f.Fuzz(func(t *testing.T, h string) {
		s, err := ParseSignature(h)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if diff := cmp.Diff(Signature{}, s); diff != "" {
				t.Fatalf("rejected header returned a signature (-want +got):\n%s", diff)
			}
			return
		}
		if len(h) > MaxSignatureLen {
			t.Fatalf("accepted a %d-byte header", len(h))
		}
		for _, f := range []string{s.KeyID, s.Tenant, s.Env, s.Nonce} {
			if !tokenscheme.IsBase64URL(f) || len(f) > 64 {
				t.Fatalf("accepted field %q", f)
			}
		}
		if s.Timestamp <= 0 || len(s.MAC) != 32 {
			t.Fatalf("accepted timestamp %d, MAC of %d bytes", s.Timestamp, len(s.MAC))
		}
		again, err := ParseSignature(s.String())
		if err != nil {
			t.Fatalf("String() of an accepted signature does not parse: %v", err)
		}
		if diff := cmp.Diff(s, again); diff != "" {
			t.Fatalf("String() re-parses differently (-first +second):\n%s", diff)
		}
		if s.String() != again.String() {
			t.Fatal("String() is not stable")
		}
	})
}
