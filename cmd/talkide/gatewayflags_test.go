package main

import (
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/roles"
)

// TestDevGatewayBodyFlags: the gateway's body bounds from the flags reach
// the gateway talkide dev runs: a model call over --gateway-max-body is
// refused (413), one under it goes through.
func TestDevGatewayBodyFlags(t *testing.T) {
	st := startDevT(t, roles.DevConfig{DataDir: filepath.Join(t.TempDir(), "data"), Addr: "127.0.0.1:0",
		Bounds: roles.Bounds{MaxBody: 64 << 10, MaxBuffered: 1 << 20}, Logger: slog.New(slog.DiscardHandler)})
	conv := createConversation(t, st.Info.ControlPlane).ID
	status, tok := mint(t, st.Info.ControlPlane, devIdentity(t, st), conv)
	if status != http.StatusOK {
		t.Fatalf("mint: %d", status)
	}
	call := func(text string) (int, string) {
		body := []byte(`{"model":"claude-sonnet-5-5","max_tokens":16,"messages":[{"role":"user","content":"` + text + `"}]}`)
		return do(t, newReq(t, http.MethodPost, st.Info.Gateway+"/v1/messages", body, map[string]string{
			minting.ConversationHeader: conv, minting.TokenHeader: tok.Token,
		}))
	}
	if code, body := call("hello"); code != http.StatusOK {
		t.Fatalf("a small call: %d %s", code, body)
	}
	if code, body := call(strings.Repeat("a", 100<<10)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a call of 100 KiB over a 64 KiB bound: %d %s", code, body)
	}
}

func TestGatewayFlagsRefuseBadSizes(t *testing.T) {
	for _, args := range [][]string{
		{"--gateway-max-body=0"},
		{"--gateway-max-body=-1Mi"},
		{"--gateway-max-buffered=lots"},
		{"--gateway-max-body=64Mi", "--gateway-max-buffered=32Mi"},
	} {
		code, _, stderr := talkide(t, append([]string{"dev", "--data-dir", t.TempDir()}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "--gateway-max-") {
			t.Errorf("talkide dev %v: exit %d, %s", args, code, stderr)
		}
	}
}
