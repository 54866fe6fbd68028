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
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// newWorkspace returns a workspace in a fresh temporary directory.
func newWorkspace(t testing.TB) *Workspace {
	t.Helper()
	ws, err := NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// numbered is n lines of format, each with its number (from 1).
func numbered(format string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, format, i)
	}
	return b.String()
}

// writeFiles creates files (path → content) under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// symlink creates link → target.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// input marshals v (a map or struct) as a tool input; a string is used as
// raw JSON.
func input(t *testing.T, v any) json.RawMessage {
	t.Helper()
	if s, ok := v.(string); ok {
		return json.RawMessage(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run calls tool with in and fails the test on a Go error.
func run(t *testing.T, tool Tool, ws *Workspace, in any) Result {
	t.Helper()
	res, err := tool.Run(context.Background(), Call{ID: "toolu_1", Input: input(t, in), Workspace: ws, Jail: testJail(t, ws)})
	if err != nil {
		t.Fatalf("%s.Run: unexpected Go error: %v", tool.Name(), err)
	}
	return res
}

// readFile returns the content of root/name.
func readFile(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDefault(t *testing.T) {
	tools := Default(nil)
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name())
		if tool.Description() == "" {
			t.Errorf("%s: empty description", tool.Name())
		}
		schema := tool.InputSchema()
		if schema["type"] != "object" {
			t.Errorf("%s: schema type = %v", tool.Name(), schema["type"])
		}
		props, _ := schema["properties"].(map[string]any)
		req, _ := schema["required"].([]any)
		if len(req) == 0 {
			t.Errorf("%s: no required fields", tool.Name())
		}
		for _, r := range req {
			if _, ok := props[r.(string)]; !ok {
				t.Errorf("%s: required field %v not in properties", tool.Name(), r)
			}
		}
		if _, err := json.Marshal(schema); err != nil {
			t.Errorf("%s: schema does not marshal: %v", tool.Name(), err)
		}
		// Fresh map each call.
		schema["mutated"] = true
		if _, ok := tool.InputSchema()["mutated"]; ok {
			t.Errorf("%s: InputSchema returns a shared map", tool.Name())
		}
	}
	if diff := cmp.Diff([]string{"Bash", "Read", "Write", "Edit", "Glob", "Grep", "LS", "TodoWrite"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if Find(tools, "Grep") == nil || Find(tools, "Teleport") != nil {
		t.Error("Find")
	}

	b := Default(&Options{BashTimeout: time.Hour, MaxOutputBytes: 5})[0].(*Bash)
	if b.Timeout != MaxBashTimeout || b.MaxOutputBytes != minOutputBytes || b.Env != nil {
		t.Errorf("defaults not applied: %+v", b)
	}
	env := []string{"A=1"}
	b = Default(&Options{Env: env})[0].(*Bash)
	env[0] = "A=2"
	if b.Env[0] != "A=1" || b.Timeout != DefaultBashTimeout || b.MaxOutputBytes != DefaultMaxOutputBytes {
		t.Errorf("options not copied: %+v", b)
	}
}

func TestRunWithoutWorkspace(t *testing.T) {
	for _, tool := range Default(nil) {
		if _, err := tool.Run(context.Background(), Call{Input: json.RawMessage(`{}`)}); err == nil {
			t.Errorf("%s: no error without a workspace", tool.Name())
		}
	}
}

func TestRunCancelledContext(t *testing.T) {
	ws := newWorkspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tool := range Default(nil) {
		if _, err := tool.Run(ctx, Call{Input: json.RawMessage(`{}`), Workspace: ws}); err != context.Canceled {
			t.Errorf("%s: err = %v, want context.Canceled", tool.Name(), err)
		}
	}
}

// TestInputErrors checks that every tool reports bad input as a result
// naming the field.
func TestInputErrors(t *testing.T) {
	ws := newWorkspace(t)
	tests := map[string]struct {
		tool  Tool
		input string
		want  string // substring of the output
	}{
		"bash missing command":   {&Bash{}, `{}`, `required field "command" is missing`},
		"bash null command":      {&Bash{}, `{"command":null}`, `required field "command" is missing`},
		"bash command type":      {&Bash{}, `{"command":5}`, `field "command" must be a string, got number`},
		"bash timeout type":      {&Bash{}, `{"command":"true","timeout":"5"}`, `field "timeout" must be an integer, got string`},
		"bash empty command":     {&Bash{}, `{"command":""}`, `"command" must not be empty`},
		"bash not an object":     {&Bash{}, `[1]`, `must be a JSON object`},
		"bash empty input":       {&Bash{}, ``, `required field "command" is missing`},
		"read missing path":      {&Read{}, `{"offset":1}`, `required field "file_path" is missing`},
		"read offset type":       {&Read{}, `{"file_path":"a","offset":"2"}`, `field "offset" must be an integer, got string`},
		"read negative limit":    {&Read{}, `{"file_path":"a","limit":-1}`, `"limit" must not be negative`},
		"write missing content":  {&Write{}, `{"file_path":"a"}`, `required field "content" is missing`},
		"write content type":     {&Write{}, `{"file_path":"a","content":["x"]}`, `field "content" must be a string, got array`},
		"edit missing new":       {&Edit{}, `{"file_path":"a","old_string":"x"}`, `required field "new_string" is missing`},
		"edit replace_all type":  {&Edit{}, `{"file_path":"a","old_string":"x","new_string":"y","replace_all":"yes"}`, `field "replace_all" must be a boolean, got string`},
		"glob missing pattern":   {&Glob{}, `{"path":"."}`, `required field "pattern" is missing`},
		"grep missing pattern":   {&Grep{}, `{"path":"."}`, `required field "pattern" is missing`},
		"grep -i type":           {&Grep{}, `{"pattern":"x","-i":"true"}`, `field "-i" must be a boolean, got string`},
		"grep -A type":           {&Grep{}, `{"pattern":"x","-A":1.5}`, `field "-A" must be an integer, got number 1.5`},
		"grep bad mode":          {&Grep{}, `{"pattern":"x","output_mode":"lines"}`, `"output_mode" must be`},
		"grep negative -C":       {&Grep{}, `{"pattern":"x","-C":-1}`, `"-C" must not be negative`},
		"ls missing path":        {&LS{}, `{"ignore":[]}`, `required field "path" is missing`},
		"ls ignore type":         {&LS{}, `{"path":".","ignore":[1]}`, `field "ignore" must be a string, got number`},
		"todo missing todos":     {&TodoWrite{}, `{}`, `required field "todos" is missing`},
		"todo item type":         {&TodoWrite{}, `{"todos":["a"]}`, `field "todos" must be an object, got string`},
		"unknown fields ignored": {&Glob{}, `{"pattern":"*.none","bogus":{"a":1}}`, `No files found`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res := run(t, tt.tool, ws, tt.input)
			if !strings.Contains(res.Output, tt.want) {
				t.Errorf("output %q does not contain %q", res.Output, tt.want)
			}
			if wantErr := name != "unknown fields ignored"; res.IsError != wantErr {
				t.Errorf("IsError = %v, want %v", res.IsError, wantErr)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	s := strings.Repeat("a", 500) + strings.Repeat("é", 500) + strings.Repeat("z", 500)
	got := truncate(s, 300)
	if len(got) > 300 {
		t.Errorf("len = %d, want <= 300", len(got))
	}
	if !strings.HasPrefix(got, "aaaa") || !strings.HasSuffix(got, "zzzz") {
		t.Errorf("head or tail lost: %q", got)
	}
	if !strings.Contains(got, "[output truncated: 2000 bytes total]") {
		t.Errorf("no note: %q", got)
	}
	if truncate("short", 300) != "short" {
		t.Error("short string changed")
	}
	if !utf8.ValidString(truncate(strings.Repeat("é", 1000), 301)) {
		t.Error("cut inside a rune")
	}
}

func TestHeadTail(t *testing.T) {
	var all strings.Builder
	h := newHeadTail(300)
	// Writes of varying sizes, some larger than the whole buffer.
	for i, size := range []int{1, 7, 100, 149, 3, 500, 2, 151, 1000, 13} {
		chunk := strings.Repeat(string(rune('a'+i)), size)
		all.WriteString(chunk)
		h.Write([]byte(chunk))
	}
	s := all.String()
	got := h.String()
	note := truncateNote(len(s))
	i := strings.Index(got, note)
	if i < 0 {
		t.Fatalf("no note in %q", got)
	}
	head, tail := got[:i], got[i+len(note):]
	if !strings.HasPrefix(s, head) || !strings.HasSuffix(s, tail) {
		t.Errorf("head %q / tail %q not from the input", head, tail)
	}
	if len(got) > 300 || len(head) < 100 || len(tail) < 100 {
		t.Errorf("sizes: total %d head %d tail %d", len(got), len(head), len(tail))
	}

	small := newHeadTail(300)
	small.Write([]byte("hello "))
	small.Write([]byte("world"))
	if got := small.String(); got != "hello world" {
		t.Errorf("small = %q", got)
	}
	exact := newHeadTail(300)
	exact.Write([]byte(strings.Repeat("x", 200)))
	exact.Write([]byte(strings.Repeat("y", 100)))
	if got := exact.String(); got != strings.Repeat("x", 200)+strings.Repeat("y", 100) {
		t.Errorf("exactly max = %q", got)
	}
}

func TestCompleteRunes(t *testing.T) {
	tests := map[string]struct {
		in   string
		want int
	}{
		"ascii":          {"abc", 3},
		"whole rune":     {"aé", 3},
		"cut 2-byte":     {"a\xc3", 1},
		"cut 3-byte":     {"a\xe2\x82", 1},
		"whole 4-byte":   {"a\xf0\x9f\x98\x80", 5},
		"cut 4-byte":     {"a\xf0\x9f\x98", 1},
		"invalid":        {"a\x80\x80\x80\x80", 5},
		"empty":          {"", 0},
		"lone lead byte": {"\xf0", 0},
	}
	for name, tt := range tests {
		if got := completeRunes([]byte(tt.in)); got != tt.want {
			t.Errorf("%s: completeRunes(%q) = %d, want %d", name, tt.in, got, tt.want)
		}
	}
}

func TestIntegralNumbers(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{"f.txt": "1\n2\n3\n"})
	// 2.0 and 1e0 are integers in JSON Schema's eyes.
	res := run(t, &Read{}, ws, `{"file_path":"f.txt","offset":2.0,"limit":1e0}`)
	if res.IsError || !strings.HasPrefix(res.Output, "     2\t2\n\n[showed lines 2-2 of 3") {
		t.Errorf("result = %+v", res)
	}
	res = run(t, &Read{}, ws, `{"file_path":"f.txt","offset":2.5}`)
	if !res.IsError || !strings.Contains(res.Output, `field "offset" must be an integer, got number 2.5`) {
		t.Errorf("result = %+v", res)
	}
}

func TestBashDescription(t *testing.T) {
	d := (&Bash{Timeout: 30 * time.Second, MaxOutputBytes: 5000}).Description()
	if !strings.Contains(d, "default 30000, max 600000") || !strings.Contains(d, "beyond 5000 bytes") {
		t.Errorf("description = %q", d)
	}
	if d := (&Bash{}).Description(); !strings.Contains(d, "default 120000") || !strings.Contains(d, "beyond 30000 bytes") {
		t.Errorf("default description = %q", d)
	}
}

func TestStreamCap(t *testing.T) {
	var got []string
	emit := StreamCap(10, func(s string) { got = append(got, s) })
	for _, c := range []string{"abcd", "efgh", "ijkl", "mnop"} {
		emit(c)
	}
	if len(got) != 4 || got[0] != "abcd" || got[1] != "efgh" || got[2] != "ij" || !strings.Contains(got[3], "stopped after 10 bytes") {
		t.Fatalf("streamed %q", got)
	}
}
