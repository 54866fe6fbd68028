package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/talkide/platform/internal/atomicfile"
)

// Todo is one item of the model's todo list.
type Todo struct {
	Content    string `json:"content"`
	Status     string `json:"status"`               // TodoPending, TodoInProgress or TodoCompleted
	ActiveForm string `json:"activeForm,omitempty"` // "Running the tests", for "Run the tests"
	ID         string `json:"id,omitempty"`
}

// Todo statuses.
const (
	TodoPending    = "pending"
	TodoInProgress = "in_progress"
	TodoCompleted  = "completed"
)

// TodoWriteInput is the input of TodoWrite: the whole new list.
type TodoWriteInput struct {
	Todos []Todo `json:"todos"`
}

// Todo list limits.
const (
	MaxTodos     = 100
	MaxTodoChars = 1000 // characters of an item's content or activeForm
)

// TodosFile is the file, in Call.StateDir, that holds the conversation's
// todo list as {"todos":[...]}.
const TodosFile = "todos.json"

const todoWriteDescription = `Creates and updates the todo list for this conversation, to plan and track multi-step work and show the user your progress.

- Use it for tasks with three or more distinct steps, or when the user gives you several things to do. Skip it for a single, simple step.
- Each call replaces the whole list: send every item, each with content ("Run the tests"), status (pending, in_progress or completed) and optionally activeForm ("Running the tests").
- Keep exactly one item in_progress while you work (at most one at any time). Mark an item completed as soon as it is done — not before: if tests fail or work remains, keep it in_progress and add items for what blocks it.
- At most 100 items.`

// TodoWrite keeps the model's todo list in Call.StateDir.
type TodoWrite struct{}

func (*TodoWrite) Name() string        { return "TodoWrite" }
func (*TodoWrite) Description() string { return todoWriteDescription }

func (*TodoWrite) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"todos": map[string]any{
			"type":        "array",
			"description": "The updated todo list",
			"maxItems":    MaxTodos,
			"items": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"content":    map[string]any{"type": "string", "minLength": 1},
					"status":     map[string]any{"type": "string", "enum": []any{TodoPending, TodoInProgress, TodoCompleted}},
					"activeForm": map[string]any{"type": "string"},
					"id":         map[string]any{"type": "string"},
				},
				"required": []any{"content", "status"},
			},
		},
	}, "todos")
}

func (*TodoWrite) Run(ctx context.Context, call Call) (Result, error) {
	var in TodoWriteInput
	if res, done, err := begin(ctx, call, &in, "todos"); done {
		return res, err
	}
	if err := validateTodos(in.Todos); err != nil {
		return errorResult("invalid input: %v", err), nil
	}
	list := renderTodos(in.Todos)
	if call.StateDir == "" {
		return Result{Output: list + "\n(This conversation has no state directory: the list was not saved; it lives only in this conversation's history.)"}, nil
	}
	if err := saveTodos(call.StateDir, in.Todos); err != nil {
		return errorResult("The todo list is valid but could not be saved: %v\n%s", err, list), nil
	}
	return Result{Output: list}, nil
}

func validateTodos(todos []Todo) error {
	if len(todos) > MaxTodos {
		return fmt.Errorf("the list has %d items; at most %d are allowed", len(todos), MaxTodos)
	}
	var active []string
	ids := make(map[string]int)
	for i, t := range todos {
		switch {
		case strings.TrimSpace(t.Content) == "":
			return fmt.Errorf("todos[%d]: content must not be empty", i)
		case utf8.RuneCountInString(t.Content) > MaxTodoChars:
			return fmt.Errorf("todos[%d]: content is longer than %d characters", i, MaxTodoChars)
		case utf8.RuneCountInString(t.ActiveForm) > MaxTodoChars:
			return fmt.Errorf("todos[%d]: activeForm is longer than %d characters", i, MaxTodoChars)
		}
		switch t.Status {
		case TodoPending, TodoCompleted:
		case TodoInProgress:
			active = append(active, fmt.Sprintf("todos[%d]", i))
		default:
			return fmt.Errorf("todos[%d]: status %q is not one of %q, %q, %q", i, t.Status, TodoPending, TodoInProgress, TodoCompleted)
		}
		if t.ID != "" {
			if j, ok := ids[t.ID]; ok {
				return fmt.Errorf("todos[%d]: id %q is already used by todos[%d]", i, t.ID, j)
			}
			ids[t.ID] = i
		}
	}
	if len(active) > 1 {
		return fmt.Errorf("%d items are in_progress (%s); at most one may be", len(active), strings.Join(active, ", "))
	}
	return nil
}

// renderTodos is the compact view the model gets back.
func renderTodos(todos []Todo) string {
	if len(todos) == 0 {
		return "Todo list cleared (0 items)."
	}
	counts := map[string]int{}
	for _, t := range todos {
		counts[t.Status]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Todo list updated (%s: %d completed, %d in progress, %d pending):",
		plural(len(todos), "item"), counts[TodoCompleted], counts[TodoInProgress], counts[TodoPending])
	for _, t := range todos {
		mark := "[ ]"
		switch t.Status {
		case TodoCompleted:
			mark = "[x]"
		case TodoInProgress:
			mark = "[>]"
		}
		b.WriteString("\n" + mark + " " + strings.Join(strings.Fields(t.Content), " "))
	}
	return b.String()
}

type todosState struct {
	Todos []Todo `json:"todos"`
}

// saveTodos writes the list to dir/TodosFile atomically, mode 0600.
func saveTodos(dir string, todos []Todo) error {
	if todos == nil {
		todos = []Todo{}
	}
	data, err := json.MarshalIndent(todosState{Todos: todos}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, TodosFile), append(data, '\n'), 0o600)
}

// LoadTodos returns the todo list TodoWrite last saved in stateDir (a
// Call.StateDir); no list yet is an empty list, not an error.
func LoadTodos(stateDir string) ([]Todo, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, TodosFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tools: todo list: %w", err)
	}
	var st todosState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("tools: todo list %s: %w", TodosFile, err)
	}
	return st.Todos, nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory and a rename, creating missing parent directories (0o755). An
// existing file keeps its permission bits; a new one gets perm. It works by
// path, so it is only for the tools' state directory, which the platform
// names; files of the workspace are written by Workspace.writeFile.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return errors.New("not a regular file")
		}
		perm = fi.Mode().Perm()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, perm)
}
