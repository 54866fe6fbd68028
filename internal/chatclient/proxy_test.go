package chatclient

import (
	"context"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/syncbuf"
)

// waitFor returns once out holds s n times, failing the test when ctx
// ends first.
func waitFor(ctx context.Context, t *testing.T, out *syncbuf.Buffer, s string, n int) {
	t.Helper()
	if got, err := out.Wait(ctx, func(got string) bool { return strings.Count(got, s) >= n }); err != nil {
		t.Fatalf("output never held %q %d times:\n%s", s, n, got)
	}
}
