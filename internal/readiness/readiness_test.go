package readiness

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbes(t *testing.T) {
	dir := t.TempDir()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer up.Close()
	tokenErr := error(nil)
	h := Handler(map[string]Check{
		"session volume writable": Writable(dir),
		"control-plane reachable": Reachable(up.Client(), up.URL),
		"token readable":          func(context.Context) error { return tokenErr },
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "next") }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(ReadyPath); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Errorf("ready: %d %s", code, body)
	}
	tokenErr = errors.New("secret /var/run/x: permission denied")
	if code, body := get(ReadyPath); code != 503 || !strings.Contains(body, `"token readable"`) || strings.Contains(body, "/var/run") {
		t.Errorf("token unreadable: %d %s", code, body)
	}
	tokenErr = nil
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if os.Getuid() != 0 { // root writes anyway
		if code, body := get(ReadyPath); code != 503 || !strings.Contains(body, "session volume writable") {
			t.Errorf("read-only volume: %d %s", code, body)
		}
	}
	if err := Writable(filepath.Join(dir, "gone"))(context.Background()); err == nil {
		t.Error("a missing directory is writable")
	}
	up.Close()
	if code, body := get(ReadyPath); code != 503 || !strings.Contains(body, "control-plane reachable") {
		t.Errorf("control-plane down: %d %s", code, body)
	}
	if code, body := get(LivePath); code != 200 || body != "ok\n" {
		t.Errorf("live: %d %s", code, body)
	}
	if _, body := get("/v1/sessions"); body != "next" {
		t.Errorf("other paths: %s", body)
	}
}
