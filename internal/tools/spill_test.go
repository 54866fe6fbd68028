package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spilled returns the output kept for call id under stateDir, failing the
// test if there is none, and checks its mode and that no temporary file is
// left.
func spilled(t *testing.T, stateDir, id string) string {
	t.Helper()
	dir := filepath.Join(stateDir, SpillDir)
	p := filepath.Join(dir, id+".txt")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("no full output kept: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want mode 0700", dir, di.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func spillNote(id string, size int) string {
	return fmt.Sprintf("[full output (%d bytes) kept on the session volume as tool-output/%s.txt]", size, id)
}

func TestSpillBash(t *testing.T) {
	ws := newWorkspace(t)
	state := filepath.Join(t.TempDir(), "tools")
	var streamed strings.Builder
	res, err := (&Bash{MaxOutputBytes: 1000}).Run(context.Background(), Call{
		ID:        "toolu_big",
		Input:     input(t, map[string]any{"command": headSeqTailCommand}),
		Workspace: ws, Jail: testJail(t, ws),
		StateDir: state,
		Output:   func(c string) { streamed.WriteString(c) },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := headSeqTail

	// The model's text: cut as before, then the note.
	wantEnd := "100000\nTAIL\nexit status 4\n" + spillNote("toolu_big", len(want))
	if !res.IsError || !strings.HasPrefix(res.Output, "HEAD\n1\n2\n") || !strings.HasSuffix(res.Output, wantEnd) ||
		!strings.Contains(res.Output, fmt.Sprintf("[output truncated: %d bytes total]", len(want))) {
		t.Errorf("output = %q", res.Output)
	}
	if len(res.Output) > 1000+len("\nexit status 4\n")+len(spillNote("toolu_big", len(want))) {
		t.Errorf("output is %d bytes", len(res.Output))
	}
	// The whole output on disk, byte for byte, and the stream untouched.
	if got := spilled(t, state, "toolu_big"); got != want {
		t.Errorf("kept output differs: %d bytes, want %d", len(got), len(want))
	}
	if streamed.String() != want {
		t.Errorf("streamed %d bytes, want %d", streamed.Len(), len(want))
	}
}

func TestSpillRead(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{"f.txt": numbered("line %d é\n", 3000)})
	tests := map[string]map[string]any{
		"default limit":       {"file_path": "f.txt"}, // 2000 lines, and a note about the rest
		"to the end":          {"file_path": "f.txt", "offset": 2500},
		"offset and limit":    {"file_path": "f.txt", "offset": 10, "limit": 100},
		"limit past the end":  {"file_path": "f.txt", "offset": 2950, "limit": 100},
		"limit is all":        {"file_path": "f.txt", "limit": 3000},
		"limit beyond all of": {"file_path": "f.txt", "limit": 5000},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			res, err := (&Read{MaxOutputBytes: 300}).Run(context.Background(), Call{ID: "toolu_r", Input: input(t, in), Workspace: ws, StateDir: state, Jail: testJail(t, ws)})
			if err != nil || res.IsError {
				t.Fatalf("Read: %+v, %v", res, err)
			}
			// What Read shows without the cap is what is kept.
			whole := run(t, &Read{MaxOutputBytes: 1 << 30}, ws, in)
			if got := spilled(t, state, "toolu_r"); got != whole.Output {
				t.Errorf("kept output differs from the uncut output:\n%.200q…\nwant\n%.200q…", got, whole.Output)
			}
			if !strings.Contains(res.Output, "[output truncated to 300 bytes: showed lines") ||
				!strings.HasSuffix(res.Output, "]\n"+spillNote("toolu_r", len(whole.Output))) {
				t.Errorf("output = %q", res.Output)
			}
		})
	}
}

// TestSpillTools checks the other tools whose output can be cut.
func TestSpillTools(t *testing.T) {
	ws := newWorkspace(t)
	files := map[string]string{}
	for i := range 300 {
		files[fmt.Sprintf("dir/file-with-a-long-name-%03d.txt", i)] = "needle\n"
	}
	writeFiles(t, ws.Root(), files)
	tests := map[string]struct {
		tool Tool
		in   map[string]any
	}{
		"Glob":           {&Glob{MaxOutputBytes: 500}, map[string]any{"pattern": "**/*.txt"}},
		"Grep files":     {&Grep{MaxOutputBytes: 500}, map[string]any{"pattern": "needle"}},
		"Grep content":   {&Grep{MaxOutputBytes: 500}, map[string]any{"pattern": "needle", "output_mode": "content"}},
		"Grep count":     {&Grep{MaxOutputBytes: 500}, map[string]any{"pattern": "needle", "output_mode": "count"}},
		"Grep head note": {&Grep{MaxOutputBytes: 500}, map[string]any{"pattern": "needle", "output_mode": "content", "head_limit": 250}},
		"LS":             {&LS{MaxOutputBytes: 500}, map[string]any{"path": "."}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			res, err := tt.tool.Run(context.Background(), Call{ID: "toolu_t", Input: input(t, tt.in), Workspace: ws, StateDir: state, Jail: testJail(t, ws)})
			if err != nil || res.IsError {
				t.Fatalf("%+v, %v", res, err)
			}
			var whole Result
			switch tool := tt.tool.(type) {
			case *Glob:
				whole = run(t, &Glob{MaxOutputBytes: 1 << 30}, ws, tt.in)
			case *Grep:
				whole = run(t, &Grep{MaxOutputBytes: 1 << 30}, ws, tt.in)
			case *LS:
				whole = run(t, &LS{MaxOutputBytes: 1 << 30}, ws, tt.in)
			default:
				t.Fatalf("no uncut run for %T", tool)
			}
			if got := spilled(t, state, "toolu_t"); got != whole.Output {
				t.Errorf("kept output differs from the uncut output:\n%q\nwant\n%q", got, whole.Output)
			}
			if !strings.Contains(res.Output, "[output truncated:") || !strings.HasSuffix(res.Output, "\n"+spillNote("toolu_t", len(whole.Output))) {
				t.Errorf("output = %q", res.Output)
			}
		})
	}
}

func TestSpillNotNeeded(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{"f.txt": strings.Repeat("x\n", 1000)})
	state := t.TempDir()
	for name, tc := range map[string]struct {
		tool Tool
		in   map[string]any
	}{
		"small Bash":        {&Bash{}, map[string]any{"command": "seq 1 100"}},
		"small Read":        {&Read{}, map[string]any{"file_path": "f.txt"}},
		"Read cut by limit": {&Read{}, map[string]any{"file_path": "f.txt", "limit": 10}},
		"small Grep":        {&Grep{}, map[string]any{"pattern": "x", "output_mode": "count"}},
		"small LS":          {&LS{}, map[string]any{"path": "."}},
		"failed Bash":       {&Bash{}, map[string]any{"command": "exit 3"}},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := tc.tool.Run(context.Background(), Call{ID: "toolu_s", Input: input(t, tc.in), Workspace: ws, StateDir: state, Jail: testJail(t, ws)})
			if err != nil || strings.Contains(res.Output, "session volume") {
				t.Errorf("%+v, %v", res, err)
			}
		})
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("state dir holds %v, want nothing", entries)
	}
}

func TestSpillWithoutStateDir(t *testing.T) {
	ws := newWorkspace(t)
	res := run(t, &Bash{MaxOutputBytes: 300}, ws, map[string]any{"command": "seq 1 10000"})
	if !strings.Contains(res.Output, "[output truncated:") || strings.Contains(res.Output, "session volume") {
		t.Errorf("output = %q", res.Output)
	}
}

func TestSpillCancelled(t *testing.T) {
	ws := newWorkspace(t)
	state := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := (&Bash{MaxOutputBytes: 300}).Run(ctx, Call{
		ID: "toolu_c", Input: input(t, map[string]any{"command": "seq 1 10000; sleep 30"}), Workspace: ws, StateDir: state, Jail: testJail(t, ws),
		Output: func(string) { cancel() },
	})
	if err != context.Canceled {
		t.Fatalf("err = %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(state, SpillDir))
	if len(entries) != 0 {
		t.Errorf("an interrupted call kept %v", entries)
	}
}

func TestSpillNames(t *testing.T) {
	tests := map[string]string{
		"toolu_01AbC-x":          "toolu_01AbC-x.txt",
		"../../etc/x":            "______etc_x.txt",
		"a/b":                    "a_b.txt",
		".hidden":                "_hidden.txt",
		"":                       "",
		strings.Repeat("a", 201): "",
	}
	for id, want := range tests {
		if got := spillName(id); got != want {
			t.Errorf("spillName(%q) = %q, want %q", id, got, want)
		}
	}
	ws := newWorkspace(t)
	state := t.TempDir()
	res, _ := (&Bash{MaxOutputBytes: 300}).Run(context.Background(), Call{ID: "../x", Input: input(t, map[string]any{"command": "seq 1 1000"}), Workspace: ws, StateDir: state, Jail: testJail(t, ws)})
	if !strings.HasSuffix(res.Output, "as tool-output/___x.txt]") {
		t.Errorf("output = %q", res.Output)
	}
	spilled(t, state, "___x")
	res, _ = (&Bash{MaxOutputBytes: 300}).Run(context.Background(), Call{Input: input(t, map[string]any{"command": "seq 1 1000"}), Workspace: ws, StateDir: state, Jail: testJail(t, ws)})
	if strings.Contains(res.Output, "session volume") {
		t.Errorf("a call without an id kept its output: %q", res.Output)
	}
}

func TestSpillFailures(t *testing.T) {
	ws := newWorkspace(t)
	file := filepath.Join(t.TempDir(), "file")
	writeFiles(t, filepath.Dir(file), map[string]string{"file": ""})
	res := (&Bash{MaxOutputBytes: 300})
	got, err := res.Run(context.Background(), Call{ID: "toolu_f", Input: input(t, map[string]any{"command": "seq 1 1000"}), Workspace: ws, StateDir: file, Jail: testJail(t, ws)})
	if err != nil || !strings.HasSuffix(got.Output, "\n[the full output (3893 bytes) could not be kept on the session volume]") {
		t.Errorf("%q, %v", got.Output, err)
	}

	// Beyond MaxSpillBytes only the head is kept, and the note says so.
	state := t.TempDir()
	s := newSpill(Call{ID: "toolu_m", StateDir: state}, 10)
	s.max = 25
	for range 10 {
		s.WriteString("0123456789")
	}
	if note := s.finish(true); note != "[full output (100 bytes) too large to keep whole: its first 25 bytes are kept on the session volume as tool-output/toolu_m.txt]" {
		t.Errorf("note = %q", note)
	}
	if got := spilled(t, state, "toolu_m"); got != "0123456789012345678901234" {
		t.Errorf("kept %q", got)
	}
	if s.finish(true) != "" {
		t.Error("a second finish did something")
	}
}
