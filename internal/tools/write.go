package tools

import (
	"context"
	"errors"
	"fmt"
)

// WriteInput is the input of Write.
type WriteInput struct {
	FilePath string `json:"file_path"`
	Content  string `json:"content"`
}

const writeDescription = `Writes a file in the workspace, replacing it if it exists.

- file_path is relative to the workspace root, or absolute inside it. Missing parent directories are created.
- The write is atomic: readers see the old content or the new, never a mix. An existing file keeps its permissions.
- To change part of an existing file, prefer Edit, which sends only the change. Read a file before overwriting it.
- Do not create documentation or README files unless asked.`

// Write writes whole files.
type Write struct{}

func (*Write) Name() string        { return "Write" }
func (*Write) Description() string { return writeDescription }

func (*Write) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"file_path": property("string", "The path of the file to write, relative to the workspace root or absolute inside it"),
		"content":   property("string", "The content to write to the file"),
	}, "file_path", "content")
}

func (*Write) Run(ctx context.Context, call Call) (Result, error) {
	var in WriteInput
	if res, done, err := begin(ctx, call, &in, "file_path", "content"); done {
		return res, err
	}
	ws := call.Workspace
	path, err := ws.Resolve(in.FilePath)
	if err != nil {
		return errorResult("Cannot write %v", err), nil
	}
	rel := ws.Rel(path)
	ws.keepOriginal(call.StateDir, path)
	existed, err := ws.writeFile(path, []byte(in.Content), 0o644)
	if err != nil {
		return writeError("Cannot write", rel, err), nil
	}
	verb := "Created"
	if existed {
		verb = "Updated"
	}
	return Result{Output: fmt.Sprintf("%s %s (%s, %s)", verb, rel,
		plural(len(in.Content), "byte"), plural(countLines(in.Content), "line"))}, nil
}

// writeError is the result for a failed writeFile: what (as "Cannot write")
// rel, and why.
func writeError(what, rel string, err error) Result {
	if errors.Is(err, ErrOutsideWorkspace) {
		return errorResult("%s %v", what, err) // it names the path
	}
	return errorResult("%s %s: %v", what, rel, err)
}
