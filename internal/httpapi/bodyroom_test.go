package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

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
