package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// decodeError decodes a recorded response as the contract's error shape.
func decodeError(t *testing.T, rec *httptest.ResponseRecorder) contract.Error {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e contract.Error
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("response is not a contract.Error: %v", err)
	}
	return e
}

// asHTTPError asserts that err is an *httpapi.Error with status and code.
func asHTTPError(t *testing.T, err error, status int, code string) *httpapi.Error {
	t.Helper()
	var he *httpapi.Error
	if !errors.As(err, &he) {
		t.Fatalf("error %v (%T) is not an *httpapi.Error", err, err)
	}
	if he.Status != status || he.Code != code {
		t.Fatalf("error = %d %s (%q), want %d %s", he.Status, he.Code, he.Msg, status, code)
	}
	return he
}

func TestHandle(t *testing.T) {
	secret := errors.New("db password is hunter2")
	tests := map[string]struct {
		err        error
		wantStatus int
		wantBody   contract.ErrorBody
		wantLevel  string // "" means nothing logged at all
		wantLogged string // a substring of the logged line
	}{
		"typed error": {
			err:        httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no conversation %s", "c1"),
			wantStatus: http.StatusNotFound,
			wantBody:   contract.ErrorBody{Code: contract.CodeNotFound, Message: "no conversation c1"},
			wantLevel:  "DEBUG",
		},
		"typed error with a cause shows only the message": {
			err:        &httpapi.Error{Status: http.StatusBadGateway, Code: contract.CodeUnavailable, Msg: "worker down", Err: secret},
			wantStatus: http.StatusBadGateway,
			wantBody:   contract.ErrorBody{Code: contract.CodeUnavailable, Message: "worker down"},
			wantLevel:  "ERROR",
			wantLogged: "hunter2",
		},
		"wrapped typed error": {
			err:        fmt.Errorf("send: %w", httpapi.Errorf(http.StatusConflict, contract.CodeTurnRunning, "a turn is running")),
			wantStatus: http.StatusConflict,
			wantBody:   contract.ErrorBody{Code: contract.CodeTurnRunning, Message: "a turn is running"},
			wantLevel:  "DEBUG",
		},
		"unauthorized is a warning": {
			err:        httpapi.Errorf(http.StatusUnauthorized, contract.CodeUnauthorized, "no"),
			wantStatus: http.StatusUnauthorized,
			wantBody:   contract.ErrorBody{Code: contract.CodeUnauthorized, Message: "no"},
			wantLevel:  "WARN",
		},
		"plain error is hidden behind a 500": {
			err:        fmt.Errorf("query: %w", secret),
			wantStatus: http.StatusInternalServerError,
			wantBody:   contract.ErrorBody{Code: contract.CodeInternal, Message: "internal error"},
			wantLevel:  "ERROR",
			wantLogged: "query: db password is hunter2",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			h := httpapi.Handle(logger, func(http.ResponseWriter, *http.Request) error { return tt.err })
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))

			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			raw := rec.Body.String()
			if strings.Contains(raw, "hunter2") {
				t.Errorf("the response reveals the logged cause: %s", raw)
			}
			if diff := cmp.Diff(contract.Error{Error: tt.wantBody}, decodeError(t, rec)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			var line struct {
				Level  string `json:"level"`
				Msg    string `json:"msg"`
				Status int    `json:"status"`
				Code   string `json:"code"`
				Err    string `json:"err"`
			}
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", logs.String(), err)
			}
			if line.Level != tt.wantLevel || line.Status != tt.wantStatus || line.Code != tt.wantBody.Code {
				t.Errorf("logged level=%s status=%d code=%s, want %s %d %s", line.Level, line.Status, line.Code,
					tt.wantLevel, tt.wantStatus, tt.wantBody.Code)
			}
			if !strings.Contains(line.Err, tt.wantLogged) {
				t.Errorf("logged err = %q, want it to contain %q", line.Err, tt.wantLogged)
			}
		})
	}
}

func TestHandleSuccessAndNilLogger(t *testing.T) {
	ok := httpapi.Handle(nil, func(w http.ResponseWriter, r *http.Request) error {
		httpapi.WriteJSON(w, http.StatusCreated, map[string]string{"ok": "yes"})
		return nil
	})
	rec := httptest.NewRecorder()
	ok.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusCreated || strings.TrimSpace(rec.Body.String()) != `{"ok":"yes"}` {
		t.Errorf("got %d %q", rec.Code, rec.Body.String())
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q", got)
	}

	// A nil logger must not panic on the error path.
	failing := httpapi.Handle(nil, func(http.ResponseWriter, *http.Request) error { return errors.New("boom") })
	rec = httptest.NewRecorder()
	failing.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status = %d, want 500", rec.Code)
	}
}

func TestReadBody(t *testing.T) {
	const limit = 16
	tests := map[string]struct {
		body       string
		wantStatus int // 0: no error
	}{
		"empty":          {body: ""},
		"at the cap":     {body: strings.Repeat("a", limit)},
		"one over":       {body: strings.Repeat("a", limit+1), wantStatus: http.StatusRequestEntityTooLarge},
		"far over":       {body: strings.Repeat("a", 10*limit), wantStatus: http.StatusRequestEntityTooLarge},
		"under the caps": {body: "{}"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			got, err := httpapi.ReadBody(rec, r, limit)
			if tt.wantStatus != 0 {
				he := asHTTPError(t, err, tt.wantStatus, contract.CodeTooLarge)
				if !strings.Contains(he.Msg, "16 bytes") {
					t.Errorf("message %q does not name the limit", he.Msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadBody: %v", err)
			}
			if string(got) != tt.body {
				t.Errorf("body = %q, want %q", got, tt.body)
			}
		})
	}
}

func TestDecodeJSON(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    contract.SendMessageRequest
		wantMsg string // "" means no error; else a substring of the 400's message
	}{
		"valid":                   {body: `{"client_message_id":"m1","text":"hi"}`, want: contract.SendMessageRequest{ClientMessageID: "m1", Text: "hi"}},
		"trailing whitespace":     {body: "{\"text\":\"hi\"}\n\t ", want: contract.SendMessageRequest{Text: "hi"}},
		"empty":                   {body: ``, wantMsg: "empty"},
		"whitespace only":         {body: "  \n", wantMsg: "not valid JSON"},
		"unknown field":           {body: `{"text":"hi","txet":"x"}`, wantMsg: `unknown field "txet"`},
		"second object":           {body: `{"text":"hi"} {"text":"again"}`, wantMsg: "data after the JSON object"},
		"trailing garbage":        {body: `{"text":"hi"}x`, wantMsg: "data after the JSON object"},
		"trailing closing brace":  {body: `{"text":"hi"}}`, wantMsg: "data after the JSON object"},
		"trailing closing square": {body: `{"text":"hi"}]`, wantMsg: "data after the JSON object"},
		"wrong type":              {body: `{"text":42}`, wantMsg: "text"},
		"array instead of object": {body: `[1,2]`, wantMsg: "not valid JSON"},
		"truncated":               {body: `{"text":"hi"`, wantMsg: "not valid JSON"},
		"syntax error":            {body: `{text:"hi"}`, wantMsg: "not valid JSON"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got contract.SendMessageRequest
			err := httpapi.DecodeJSON([]byte(tt.body), &got)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("decoded (-want +got):\n%s", diff)
				}
				return
			}
			he := asHTTPError(t, err, http.StatusBadRequest, contract.CodeBadRequest)
			if !strings.Contains(he.Msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", he.Msg, tt.wantMsg)
			}
		})
	}
}

func TestID(t *testing.T) {
	tests := map[string]struct {
		id    string
		valid bool
	}{
		"plain":         {id: "demo", valid: true},
		"generated":     {id: contract.NewID("c_"), valid: true},
		"max length":    {id: strings.Repeat("a", contract.MaxIDLen), valid: true},
		"empty":         {id: ""},
		"too long":      {id: strings.Repeat("a", contract.MaxIDLen+1)},
		"dot dot":       {id: ".."},
		"slash":         {id: "a/b"},
		"leading dash":  {id: "-a"},
		"leading under": {id: "_a"},
		"space":         {id: "a b"},
		"unicode":       {id: "caf\u00e9"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := httpapi.ID("conversation id", tt.id)
			if tt.valid {
				if err != nil {
					t.Fatalf("ID(%q) = %v, want nil", tt.id, err)
				}
				return
			}
			he := asHTTPError(t, err, http.StatusBadRequest, contract.CodeInvalidID)
			if !strings.Contains(he.Msg, "conversation id") {
				t.Errorf("message %q does not name the id", he.Msg)
			}
		})
	}
}

func TestReplayPoint(t *testing.T) {
	tests := map[string]struct {
		header  string
		query   string
		want    int64
		wantBad string // the name the 400 must mention; "" means no error
	}{
		"neither":                     {want: 0},
		"header":                      {header: "7", want: 7},
		"query":                       {query: "after=9", want: 9},
		"header wins":                 {header: "7", query: "after=9", want: 7},
		"zero":                        {query: "after=0", want: 0},
		"empty query value":           {query: "after=", want: 0},
		"negative header":             {header: "-1", wantBad: "Last-Event-ID"},
		"negative query":              {query: "after=-5", wantBad: "after"},
		"non-numeric header":          {header: "abc", wantBad: "Last-Event-ID"},
		"non-numeric query":           {query: "after=x1", wantBad: "after"},
		"bad header beats good query": {header: "1.5", query: "after=3", wantBad: "Last-Event-ID"},
		"overflow":                    {query: "after=99999999999999999999", wantBad: "after"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/s?"+tt.query, nil)
			if tt.header != "" {
				r.Header.Set("Last-Event-ID", tt.header)
			}
			got, err := httpapi.ReplayPoint(r)
			if tt.wantBad != "" {
				he := asHTTPError(t, err, http.StatusBadRequest, contract.CodeBadRequest)
				if !strings.HasPrefix(he.Msg, tt.wantBad+" ") {
					t.Errorf("message %q does not start with %q", he.Msg, tt.wantBad)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ReplayPoint = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// FuzzDecodeJSON checks that DecodeJSON never panics on untrusted bodies,
// that every refusal is a 400, and that whatever it accepts is one valid
// JSON document.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`null`,
		`{"client_message_id":"m1","text":"hi"}`,
		`{"text":"hi"}}`,
		`{"text":"hi"} {}`,
		`{"text":1e999}`,
		`{"reports":[{"idempotency_key":"k","kind":"usage","conversation_id":"c","time":"2026-11-30T16:16:40Z","usage":{"model":"m","input_tokens":1}}]}`,
		`{"reports":[{"time":"not a time"}]}`,
		`{"reports":null}`,
		"{\"text\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(v any) {
			err := httpapi.DecodeJSON(body, v)
			if err == nil {
				if !json.Valid(body) {
					t.Errorf("DecodeJSON accepted %q into %T, which is not one valid JSON document", body, v)
				}
				return
			}
			var he *httpapi.Error
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest || he.Code != contract.CodeBadRequest {
				t.Errorf("DecodeJSON(%q) = %v, want a 400 bad_request", body, err)
			}
		}
		check(new(contract.SendMessageRequest))
		check(new(contract.ReportBatch))
	})
}

func TestWriteCreated(t *testing.T) {
	for created, want := range map[bool]int{true: http.StatusCreated, false: http.StatusOK} {
		rec := httptest.NewRecorder()
		httpapi.WriteCreated(rec, created, map[string]string{"id": "x"})
		if rec.Code != want || strings.TrimSpace(rec.Body.String()) != `{"id":"x"}` || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("created %v: %d %q %q, want %d", created, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String(), want)
		}
	}
}

// TestReadBodyDeclaredLength reads bodies whose Content-Length is not
// what they hold: a longer one is refused before a byte is read, and one
// that says less or more than it sends is a broken body.
func TestReadBodyDeclaredLength(t *testing.T) {
	const limit = 16
	tests := map[string]struct {
		body     string
		declared int64
		status   int
		code     string
	}{
		"as declared":         {"hello", 5, 0, ""},
		"unknown length":      {"hello", -1, 0, ""},
		"declared over":       {"hello", limit + 1, http.StatusRequestEntityTooLarge, contract.CodeTooLarge},
		"sends less":          {"hel", 5, http.StatusBadRequest, contract.CodeBadRequest},
		"sends more":          {"hello, world", 5, http.StatusBadRequest, contract.CodeBadRequest},
		"declared none, sent": {"x", 0, http.StatusBadRequest, contract.CodeBadRequest},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			body := strings.NewReader(tt.body)
			r := httptest.NewRequest(http.MethodPost, "/", body)
			r.ContentLength = tt.declared
			rec := httptest.NewRecorder()
			got, err := httpapi.ReadBody(rec, r, limit)
			if tt.status == 0 {
				if err != nil || string(got) != tt.body {
					t.Fatalf("ReadBody = %q, %v; want %q", got, err, tt.body)
				}
				return
			}
			asHTTPError(t, err, tt.status, tt.code)
			if rec.Header().Get("Connection") != "close" {
				t.Error("a body not read whole leaves the connection open")
			}
			if read := len(tt.body) - body.Len(); tt.status == http.StatusRequestEntityTooLarge && read != 0 {
				t.Errorf("read %d bytes of a body declared too large", read)
			}
		})
	}
}

// TestReadBodyGrows reads declared bodies larger than the first buffer,
// some from readers that return their last bytes with io.EOF.
func TestReadBodyGrows(t *testing.T) {
	for _, size := range []int{0, 1, 64 << 10, 64<<10 + 1, 200_001} {
		want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		for name, rd := range map[string]io.Reader{
			"plain":            bytes.NewReader(want),
			"EOF with data":    iotest.DataErrReader(bytes.NewReader(want)),
			"a byte at a time": iotest.OneByteReader(bytes.NewReader(want)),
		} {
			r := httptest.NewRequest(http.MethodPost, "/", rd)
			r.ContentLength = int64(size)
			got, err := httpapi.ReadBody(httptest.NewRecorder(), r, 1<<20)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%d bytes, %s: read %d bytes, %v", size, name, len(got), err)
			}
		}
	}
}

// FuzzReadBody reads bodies whose declared length is right, short, long
// or unknown, against a bound: a body is returned whole exactly when it
// is as long as it says (or says nothing) and within the bound; a
// declared length over the bound is 413 before anything is read, one
// that is wrong 400 (413 when the body also passes the bound), an unknown
// one over the bound 413. (The server ends a body at its Content-Length;
// the fuzzer's requests do not, so that ReadBody's own checks are tried.)
func FuzzReadBody(f *testing.F) {
	f.Add([]byte("hello"), int64(0), int64(16))
	f.Add([]byte("hello"), int64(-1), int64(16))
	f.Add([]byte("hello"), int64(2), int64(16))
	f.Add(bytes.Repeat([]byte("x"), 70_000), int64(0), int64(1<<20))
	f.Add([]byte("hello"), int64(0), int64(4))
	f.Fuzz(func(t *testing.T, body []byte, skew, limit int64) {
		if limit < 0 || limit > 1<<20 || len(body) > 1<<20 {
			return
		}
		declared := int64(len(body)) + skew // skew -1-len: unknown
		if declared < 0 {
			declared = -1
		}
		rd := bytes.NewReader(body)
		r := httptest.NewRequest(http.MethodPost, "/", rd)
		r.ContentLength = declared
		got, err := httpapi.ReadBody(httptest.NewRecorder(), r, limit)
		var status int
		if he, ok := errors.AsType[*httpapi.Error](err); ok {
			status = he.Status
		} else if err != nil {
			t.Fatalf("error %v is not an *httpapi.Error", err)
		}
		switch {
		case declared > limit:
			if status != http.StatusRequestEntityTooLarge || rd.Len() != len(body) {
				t.Fatalf("declared %d over %d: status %d, read %d bytes", declared, limit, status, len(body)-rd.Len())
			}
		case declared < 0 && int64(len(body)) > limit:
			if status != http.StatusRequestEntityTooLarge {
				t.Fatalf("unknown length, %d bytes over %d: status %d", len(body), limit, status)
			}
		case declared >= 0 && declared != int64(len(body)):
			// A body longer than it says and than the bound is both a
			// broken and a too large one.
			if status != http.StatusBadRequest && (status != http.StatusRequestEntityTooLarge || int64(len(body)) <= limit) {
				t.Fatalf("declared %d, sent %d: status %d", declared, len(body), status)
			}
		default:
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("declared %d, sent %d within %d: %d bytes back, %v", declared, len(body), limit, len(got), err)
			}
			if int64(cap(got)) > max(int64(len(body)), 0) && declared >= 0 {
				t.Fatalf("a body of %d bytes got a buffer of %d", len(body), cap(got))
			}
		}
	})
}

// TestReadBodyIn holds bodies in a room of 100 bytes, 60 of them a
// caller's at most: a body that finds no room is refused unread (429 for
// the caller's share, 503 for the whole), and release gives the room back.
func TestReadBodyIn(t *testing.T) {
	room := bodyroom.New(100, 60)
	// read returns, besides ReadBodyIn's answer, how many bytes of body
	// it read.
	read := func(key, body string, declared int64) (*httptest.ResponseRecorder, int, []byte, func(), error) {
		t.Helper()
		sr := strings.NewReader(body)
		r := httptest.NewRequest(http.MethodPost, "/", sr)
		r.ContentLength = declared
		rec := httptest.NewRecorder()
		got, release, err := httpapi.ReadBodyIn(rec, r, 50, room, key)
		return rec, len(body) - sr.Len(), got, release, err
	}
	used := func() int64 {
		u, _ := room.State()
		return u
	}

	_, _, got, releaseA, err := read("ana", strings.Repeat("a", 40), 40)
	if err != nil || len(got) != 40 || used() != 40 {
		t.Fatalf("first body: %d bytes, %v; room used %d", len(got), err, used())
	}
	// Of unknown length: room for the most a body may be (50).
	_, _, _, releaseB, err := read("ben", "b", -1)
	if err != nil || used() != 90 {
		t.Fatalf("body of unknown length: %v; room used %d, want 90", err, used())
	}
	rec, n, _, release, err := read("ana", strings.Repeat("a", 21), 21)
	he := asHTTPError(t, err, http.StatusTooManyRequests, contract.CodeTooManyUploads)
	if he.RetryAfter == "" || !strings.Contains(he.Msg, "60 bytes") || n != 0 || rec.Header().Get("Connection") != "close" {
		t.Errorf("over her share: Retry-After %q, %q, read %d bytes, Connection %q", he.RetryAfter, he.Msg, n, rec.Header().Get("Connection"))
	}
	release() // a refusal's release is harmless
	_, n, _, _, err = read("cyd", strings.Repeat("c", 11), 11)
	he = asHTTPError(t, err, http.StatusServiceUnavailable, contract.CodeTooManyUploads)
	if he.RetryAfter == "" || !strings.Contains(he.Msg, "100 bytes") || n != 0 {
		t.Errorf("over the whole: Retry-After %q, %q, read %d bytes", he.RetryAfter, he.Msg, n)
	}
	if used() != 90 {
		t.Fatalf("refusals took room: %d used", used())
	}

	releaseA()
	releaseA() // twice gives back once
	if used() != 50 {
		t.Fatalf("after a release: %d used, want 50", used())
	}
	// A body that fails to read gives its room back.
	_, _, _, _, err = read("cyd", "short", 10)
	asHTTPError(t, err, http.StatusBadRequest, contract.CodeBadRequest)
	// Declared over the most a body may be: 413, unread, no room taken.
	_, n, _, _, err = read("cyd", strings.Repeat("c", 51), 51)
	asHTTPError(t, err, http.StatusRequestEntityTooLarge, contract.CodeTooLarge)
	if n != 0 {
		t.Errorf("read %d bytes of a body declared too large", n)
	}
	releaseB()
	if used() != 0 {
		t.Fatalf("all released: %d used", used())
	}

	// Without a room, nothing is bounded but the body's own size.
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("free"))
	got, release, err = httpapi.ReadBodyIn(httptest.NewRecorder(), r, 50, nil, "")
	if err != nil || string(got) != "free" {
		t.Fatalf("nil room: %q, %v", got, err)
	}
	release()
}
