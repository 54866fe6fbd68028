package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// runIn calls tool with in and call's StateDir, failing the test on a Go
// error.
func runIn(t *testing.T, tool Tool, ws *Workspace, stateDir string, in any) Result {
	t.Helper()
	res, err := tool.Run(context.Background(), Call{ID: "toolu_1", Input: input(t, in), Workspace: ws, StateDir: stateDir})
	if err != nil {
		t.Fatalf("%s.Run: unexpected Go error: %v", tool.Name(), err)
	}
	return res
}

func TestTodoWriteValidation(t *testing.T) {
	ws := newWorkspace(t)
	item := func(content, status string) map[string]any {
		return map[string]any{"content": content, "status": status}
	}
	many := make([]any, MaxTodos+1)
	for i := range many {
		many[i] = item("step", "pending")
	}
	tests := map[string]struct {
		in   any
		want string
	}{
		"missing todos":       {`{}`, `required field "todos" is missing`},
		"todos not a list":    {`{"todos":"x"}`, `field "todos" must be an array, got string`},
		"status not a string": {`{"todos":[{"content":"a","status":1}]}`, `must be a string, got number`},
		"empty content":       {map[string]any{"todos": []any{item("a", "pending"), item(" ", "pending")}}, "todos[1]: content must not be empty"},
		"unknown status":      {map[string]any{"todos": []any{item("a", "done")}}, `todos[0]: status "done" is not one of "pending", "in_progress", "completed"`},
		"missing status":      {`{"todos":[{"content":"a"}]}`, `todos[0]: status "" is not one of`},
		"two in progress": {map[string]any{"todos": []any{item("a", "in_progress"), item("b", "pending"), item("c", "in_progress")}},
			"2 items are in_progress (todos[0], todos[2]); at most one may be"},
		"too many":      {map[string]any{"todos": many}, "the list has 101 items; at most 100 are allowed"},
		"long content":  {map[string]any{"todos": []any{item(strings.Repeat("é", MaxTodoChars+1), "pending")}}, "todos[0]: content is longer than 1000 characters"},
		"duplicate ids": {`{"todos":[{"content":"a","status":"pending","id":"1"},{"content":"b","status":"pending","id":"1"}]}`, `todos[1]: id "1" is already used by todos[0]`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			res := runIn(t, &TodoWrite{}, ws, dir, tt.in)
			if !res.IsError || !strings.Contains(res.Output, tt.want) {
				t.Errorf("result %+v, want an error containing %q", res, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, TodosFile)); !os.IsNotExist(err) {
				t.Errorf("an invalid list was saved (%v)", err)
			}
		})
	}
}

func TestTodoWritePersists(t *testing.T) {
	ws := newWorkspace(t)
	dir := filepath.Join(t.TempDir(), "state", "tools") // created on first use
	list := []Todo{
		{Content: "Write the parser", Status: TodoCompleted, ID: "1"},
		{Content: "Run   the\ntests", Status: TodoInProgress, ActiveForm: "Running the tests"},
		{Content: "Update the docs", Status: TodoPending},
	}
	res := runIn(t, &TodoWrite{}, ws, dir, map[string]any{"todos": list})
	want := "Todo list updated (3 items: 1 completed, 1 in progress, 1 pending):\n" +
		"[x] Write the parser\n" +
		"[>] Run the tests\n" +
		"[ ] Update the docs"
	if res.IsError || res.Output != want {
		t.Errorf("output =\n%s\nwant\n%s", res.Output, want)
	}
	got, err := LoadTodos(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(list, got); diff != "" {
		t.Errorf("saved list (-want +got):\n%s", diff)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, TodosFile): 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode().Perm(), err, mode)
		}
	}
	var raw map[string]json.RawMessage
	if b, _ := os.ReadFile(filepath.Join(dir, TodosFile)); json.Unmarshal(b, &raw) != nil || raw["todos"] == nil {
		t.Errorf("todos.json = %s", b)
	}

	// The next call replaces the list; an empty list clears it.
	res = runIn(t, &TodoWrite{}, ws, dir, map[string]any{"todos": []Todo{}})
	if res.IsError || res.Output != "Todo list cleared (0 items)." {
		t.Errorf("clearing: %+v", res)
	}
	if got, err := LoadTodos(dir); err != nil || len(got) != 0 {
		t.Errorf("after clearing: %v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("state dir holds %v, want only %s", entries, TodosFile)
	}
}

func TestTodoWriteWithoutStateDir(t *testing.T) {
	ws := newWorkspace(t)
	res := runIn(t, &TodoWrite{}, ws, "", map[string]any{"todos": []Todo{{Content: "a", Status: TodoPending}}})
	if res.IsError || !strings.HasPrefix(res.Output, "Todo list updated (1 item: 0 completed, 0 in progress, 1 pending):\n[ ] a\n") ||
		!strings.Contains(res.Output, "the list was not saved") {
		t.Errorf("result %+v", res)
	}
	if entries, _ := os.ReadDir(ws.Root()); len(entries) != 0 {
		t.Errorf("the workspace was written to: %v", entries)
	}
}

func TestTodoWriteSaveFails(t *testing.T) {
	ws := newWorkspace(t)
	file := filepath.Join(t.TempDir(), "f")
	writeFiles(t, filepath.Dir(file), map[string]string{"f": ""})
	res := runIn(t, &TodoWrite{}, ws, filepath.Join(file, "state"), map[string]any{"todos": []Todo{{Content: "a", Status: TodoPending}}})
	if !res.IsError || !strings.Contains(res.Output, "could not be saved") || !strings.Contains(res.Output, "[ ] a") {
		t.Errorf("result %+v", res)
	}
}

func TestLoadTodosNone(t *testing.T) {
	if got, err := LoadTodos(t.TempDir()); err != nil || got != nil {
		t.Errorf("LoadTodos = %v, %v; want nil, nil", got, err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{TodosFile: "{"})
	if _, err := LoadTodos(dir); err == nil {
		t.Error("a corrupt file loads without error")
	}
}
