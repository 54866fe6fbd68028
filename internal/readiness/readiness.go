// Package readiness serves a process's Kubernetes probes: /livez (the
// process answers) and /readyz (every named check passes). Answers name
// the failing checks and nothing else: no paths, no errors, no secrets.
package readiness

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sort"
	"time"
)

// Paths of the probes.
const (
	LivePath  = "/livez"
	ReadyPath = "/readyz"
)

// Check is one condition of readiness; nil means it holds.
type Check func(ctx context.Context) error

// checkTimeout bounds one probe's checks together.
const checkTimeout = 2 * time.Second

// Handler answers LivePath and ReadyPath, and hands every other request
// to next.
func Handler(checks map[string]Check, next http.Handler) http.Handler {
	names := make([]string, 0, len(checks))
	for n := range checks {
		names = append(names, n)
	}
	sort.Strings(names)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+LivePath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+ReadyPath, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		failing := []string{}
		for _, n := range names {
			if err := checks[n](ctx); err != nil {
				failing = append(failing, n)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if len(failing) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(struct {
			Ready   bool     `json:"ready"`
			Failing []string `json:"failing"`
		}{len(failing) == 0, failing})
	})
	mux.Handle("/", next)
	return mux
}

// Writable checks that dir takes a new file: the session volume (an NFS
// mount that failed answers EIO or hangs until the check's deadline).
func Writable(dir string) Check {
	return func(ctx context.Context) error {
		done := make(chan error, 1)
		go func() {
			f, err := os.CreateTemp(dir, ".readyz-*")
			if err == nil {
				name := f.Name()
				_, err = f.Write([]byte("ok"))
				err = errors.Join(err, f.Sync(), f.Close(), os.Remove(name))
			}
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Reachable checks that an HTTP server answers at base (any status will
// do: reaching it is the point).
func Reachable(client *http.Client, base string) Check {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
}
