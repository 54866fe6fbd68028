package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/trust"
)

// kubeletDir lays out a mounted Secret as the kubelet does: each version
// in a ..<timestamp> directory, ..data a symlink to the current one, and
// each key a symlink through ..data.
type kubeletDir struct {
	dir     string
	version int
	current string
}

func newKubeletDir(t *testing.T, files map[string]string) *kubeletDir {
	t.Helper()
	k := &kubeletDir{dir: t.TempDir()}
	k.swap(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(k.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// swap writes a new version and renames a new ..data over the old one
// (atomic), then removes the old version's directory, as the kubelet
// does: a read through the old path fails from that moment.
func (k *kubeletDir) swap(t *testing.T, files map[string]string) {
	t.Helper()
	k.version++
	next := fmt.Sprintf("..2026_12_02_14_00_%02d.%d", k.version, 1000+k.version)
	if err := os.Mkdir(filepath.Join(k.dir, next), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(k.dir, next, name), []byte(v), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(next, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if k.current != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, k.current)); err != nil {
			t.Fatal(err)
		}
	}
	k.current = next
}

// TestTurnsAcrossTheDataSwap runs a worker whose identity token and
// command key come from a directory laid out as the kubelet mounts a
// Secret. While turns run (each new conversation mints its first
// WorkerToken at its own moment, some before, some during, some after the
// swap), the test swaps ..data to a new identity token and, once the
// worker has read it, revokes the old one. No turn fails, and the next
// turns, which must mint with the new token, finish too.
func TestTurnsAcrossTheDataSwap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control-plane and a worker")
	}
	ctx := context.Background()
	cp, dir, logger := startDevControlPlane(t)
	if _, err := provision.EnsureEnv(ctx, cp.Store, roles.DevTenant, roles.DevEnv, ""); err != nil {
		t.Fatal(err)
	}
	tok1, rec1, err := provision.IssueIdentityToken(ctx, cp.Store, roles.DevTenant, roles.DevEnv, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := devCommandKey(cp.Secrets)
	files := func(token string) map[string]string {
		return map[string]string{
			provision.KeyIdentityToken: token,
			provision.KeyCommandKey:    trust.FormatKey(key.ID, key.Secret),
			provision.KeyCommandKeyID:  key.ID,
		}
	}
	secret := newKubeletDir(t, files(tok1))

	claudeDir := filepath.Join(dir, "claude")
	t.Setenv("TALKIDE_GATEWAY_BASE_URL", cp.HTTP.URL())
	t.Setenv("CLAUDE_CONFIG_DIR", claudeDir)
	o := roles.WorkerConfig{Listen: "127.0.0.1:0", Tenant: roles.DevTenant, Env: roles.DevEnv, CommandKeyID: "c1", CommandKeyGrace: time.Minute,
		WorkerID: "worker-swap", Logger: logger.With("proc", "worker")}
	o.IdentityTokenFile, o.CommandKeyFile = filepath.Join(secret.dir, provision.KeyIdentityToken), filepath.Join(secret.dir, provision.KeyCommandKey)
	if err := workerEnv(&o); err != nil {
		t.Fatal(err)
	}
	w := startT(t, roles.StartWorker, o)
	c := newCommandClient("worker", w.HTTP.URL(), key)
	conversation := func(id string) {
		t.Helper()
		knownConversations(t, cp.Store, id)
		if st, code := c.create(ctx, id); st != 201 {
			t.Fatalf("create %s: %d %s", id, st, code)
		}
	}
	// turn sends a message whose turn calls the model twice around a tool
	// call, and waits for it to finish normally.
	turn := func(id, msgID string) error {
		r, err := c.sendOK(ctx, id, msgID, `run [[tool:Bash {"command":"sleep 0.2; echo done"}]]`)
		if err != nil {
			return err
		}
		_, err = c.waitTurn(ctx, id, 0, r.TurnID)
		return err
	}

	const running = 8
	var wg sync.WaitGroup
	errs := make(chan error, running)
	for i := range running {
		id := fmt.Sprintf("swap-%d", i)
		conversation(id)
		wg.Go(func() {
			if err := turn(id, "m1"); err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
			}
		})
		if i == running/2 {
			// Turns are running and more start after this: the swap.
			tok2, _, err := provision.IssueIdentityToken(ctx, cp.Store, roles.DevTenant, roles.DevEnv, 0, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			secret.swap(t, files(tok2))
			// Once the worker reads the new token, the old one's grace
			// ends: revoked now.
			deadline := time.Now().Add(30 * time.Second)
			for {
				if got, _ := w.IdentityToken(); got == tok2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the worker did not read the swapped identity token")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := provision.RevokeIdentityToken(ctx, cp.Store, rec1.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := provision.Authenticate(ctx, cp.Store, tok1, time.Now()); !errors.Is(err, provision.ErrInvalidToken) {
				t.Fatalf("the old token after its revocation: %v, want refused", err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The next turns: a new conversation (its first mint is with the new
	// token alone) and the next message of one that ran across the swap.
	conversation("swap-next")
	if err := turn("swap-next", "m1"); err != nil {
		t.Errorf("a new conversation after the swap: %v", err)
	}
	if err := turn("swap-0", "m2"); err != nil {
		t.Errorf("the next turn of a conversation that ran across the swap: %v", err)
	}
}
