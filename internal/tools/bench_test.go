package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
)

// benchTree is a workspace of 20 directories, two levels deep, with 25 Go
// files of 200 lines (about 9 KB) in each: 500 files, and one more that
// holds a needle for Grep.
func benchTree(b *testing.B) *Workspace {
	b.Helper()
	ws := newWorkspace(b)
	var src strings.Builder
	src.WriteString("package p\n\n")
	for i := range 198 {
		fmt.Fprintf(&src, "var v%03d = %d // some text to search through\n", i, i)
	}
	files := map[string]string{}
	for d := range 20 {
		for f := range 25 {
			files[fmt.Sprintf("pkg%02d/sub/f%02d.go", d, f)] = src.String()
		}
	}
	files["pkg07/sub/needle.go"] = src.String() + "// the needle\n"
	for name, content := range files {
		p := filepath.Join(ws.Root(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return ws
}

// benchRun runs tool with in b.N times, failing on a tool error.
func benchRun(b *testing.B, tool Tool, ws *Workspace, in map[string]any) {
	b.Helper()
	raw, err := json.Marshal(in)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := tool.Run(ctx, Call{ID: "toolu_1", Input: raw, Workspace: ws})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %q", tool.Name(), err, res.Output)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	benchRun(b, &Read{}, benchTree(b), map[string]any{"file_path": "pkg03/sub/f07.go"})
}

func BenchmarkWrite(b *testing.B) {
	benchRun(b, &Write{}, benchTree(b), map[string]any{"file_path": "pkg03/sub/new.go", "content": "package p\n\nvar x = 1\n"})
}

func BenchmarkEdit(b *testing.B) {
	ws := benchTree(b)
	// Alternating the edit keeps it valid on every iteration.
	edits := []map[string]any{
		{"file_path": "pkg03/sub/f07.go", "old_string": "var v100 = 100", "new_string": "var v100 = 101"},
		{"file_path": "pkg03/sub/f07.go", "old_string": "var v100 = 101", "new_string": "var v100 = 100"},
	}
	raws := make([]json.RawMessage, len(edits))
	for i, e := range edits {
		raws[i], _ = json.Marshal(e)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		res, err := (&Edit{}).Run(ctx, Call{ID: "toolu_1", Input: raws[i%2], Workspace: ws})
		if err != nil || res.IsError {
			b.Fatalf("Edit: %v %q", err, res.Output)
		}
		i++
	}
}

func BenchmarkGrep(b *testing.B) {
	benchRun(b, &Grep{}, benchTree(b), map[string]any{"pattern": "needle"})
}

func BenchmarkGlob(b *testing.B) {
	benchRun(b, &Glob{}, benchTree(b), map[string]any{"pattern": "**/f1*.go"})
}

func BenchmarkLS(b *testing.B) {
	benchRun(b, &LS{}, benchTree(b), map[string]any{"path": "."})
}

// BenchmarkBash measures what the sandbox adds to a Bash call: the Bash
// tool running `true`, bare (--sandbox none), in the first layer and in
// both, one of each per iteration, so that all are measured in the same
// conditions. The helper is cmd/talkide-sandbox, built static as the
// worker image builds it (internal/sandbox's BenchmarkCommand also
// measures the talkide binary as the helper, as `go run ./cmd/talkide dev`
// uses it). It reports each one's p50 and p99 and the p50 added over bare,
// in milliseconds. Calls are paced, a pause before each, as a model's
// replies pace them: the sandbox starts the helper of a call ahead of it,
// behind the one before, and the pause is its time to get ready.
//
//	go test -run XXX -bench Bash -benchtime 300x ./internal/tools/
func BenchmarkBash(b *testing.B) {
	helper := sandboxtest.SmallHelper(b)
	ws := newWorkspace(b)
	type mode struct {
		sandboxtest.Timings
		jail *sandbox.Jail
	}
	var modes []*mode
	var rows []*sandboxtest.Timings
	for _, o := range []struct {
		name string
		mode sandbox.Mode
	}{{"bare", sandbox.ModeNone}, {"landlock", sandbox.ModeLandlock}, {"namespaces", sandbox.ModeAuto}} {
		s, err := sandbox.New(&sandbox.Options{Mode: o.mode, Helper: helper})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if o.mode == sandbox.ModeAuto && !s.Namespaces() {
			b.Fatalf("no user namespaces here: %v", s.Layers())
		}
		m := &mode{Timings: sandboxtest.Timings{Name: o.name}, jail: &sandbox.Jail{
			Sandbox: s, Workspace: ws.Root(), Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws.Root(), "LANG=C.UTF-8"},
		}}
		modes = append(modes, m)
		rows = append(rows, &m.Timings)
	}
	in := json.RawMessage(`{"command":"true"}`)
	ctx := context.Background()
	const pause = 100 * time.Millisecond
	for b.Loop() {
		for _, m := range modes {
			time.Sleep(pause)
			start := time.Now()
			res, err := (&Bash{}).Run(ctx, Call{ID: "toolu_1", Input: in, Workspace: ws, Jail: m.jail})
			if err != nil || res.IsError {
				b.Fatalf("%s: %v %q", m.Name, err, res.Output)
			}
			m.Wall = append(m.Wall, time.Since(start))
		}
	}
	sandboxtest.Report(b, rows)
}
