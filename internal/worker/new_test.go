package worker

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sessionstore"
)

func TestNewArguments(t *testing.T) {
	dir := t.TempDir()
	sessions, err := sessionstore.New(filepath.Join(dir, "projects"), &sessionstore.Options{Holder: "test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	key := CommandKey{ID: testKeyID, Key: testKey}
	ws := filepath.Join(dir, "workspaces")
	h := newFakeHarness()
	type args struct {
		tenant, env string
		key         CommandKey
		sessions    *sessionstore.Store
		workspaces  string
		h           harness.Harness
	}
	good := args{testTenant, testEnv, key, sessions, ws, h}
	tests := map[string]struct {
		change  func(*args)
		missing string // empty: New succeeds
	}{
		"all there":      {change: func(*args) {}},
		"no tenant":      {change: func(a *args) { a.tenant = "" }, missing: "tenant"},
		"no env":         {change: func(a *args) { a.env = "" }, missing: "env"},
		"no key id":      {change: func(a *args) { a.key.ID = "" }, missing: "command key id"},
		"no key":         {change: func(a *args) { a.key.Key = nil }, missing: "command key"},
		"no store":       {change: func(a *args) { a.sessions = nil }, missing: "session store"},
		"no workspaces":  {change: func(a *args) { a.workspaces = "" }, missing: "workspace root"},
		"no harness":     {change: func(a *args) { a.h = nil }, missing: "harness"},
		"nothing at all": {change: func(a *args) { *a = args{} }, missing: "command key, command key id, env, harness, session store, tenant, workspace root"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := good
			tc.change(&a)
			w, err := New(a.tenant, a.env, a.key, a.sessions, a.workspaces, a.h, nil)
			if tc.missing != "" {
				if err == nil || w != nil || !strings.HasSuffix(err.Error(), "missing "+tc.missing) {
					t.Fatalf("New = %v, %v; want an error naming %q", w, err, tc.missing)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer w.Shutdown(context.Background())
			// nil options get every default, in one place.
			if w.opts.WorkerID == "" || w.opts.Logger == nil || w.opts.Now == nil ||
				w.opts.IdleTimeout != DefaultIdleTimeout || w.opts.Heartbeat != DefaultHeartbeat ||
				w.opts.SyncRetry.Base != 10*time.Millisecond || w.opts.SyncRetry.Max != time.Second {
				t.Errorf("defaults not filled in: %+v", w.opts)
			}
		})
	}
}
