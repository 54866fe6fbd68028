package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"file_path": map[string]any{
				"type":        "string",
				"description": "The path of the file to write, relative to the workspace root or absolute inside it",
			},
			"content": map[string]any{
				"type":        "string",
				"description": "The content to write to the file",
			},
		},
		"required": []any{"file_path", "content"},
	}
}

func (*Write) Run(ctx context.Context, call Call) (Result, error) {
	if err := start(ctx, call); err != nil {
		return Result{}, err
	}
	var in WriteInput
	if err := decodeInput(call.Input, &in, "file_path", "content"); err != nil {
		return errorResult("%v", err), nil
	}
	ws := call.Workspace
	path, err := ws.Resolve(in.FilePath)
	if err != nil {
		return errorResult("Cannot write %v", err), nil
	}
	rel := ws.Rel(path)
	verb := "Created"
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return errorResult("Cannot write %s: it is a directory", rel), nil
		}
		verb = "Updated"
	}
	if err := writeAtomic(path, []byte(in.Content), 0o644); err != nil {
		return errorResult("Cannot write %s: %v", rel, err), nil
	}
	return Result{Output: fmt.Sprintf("%s %s (%s, %s)", verb, rel,
		plural(len(in.Content), "byte"), plural(countLines(in.Content), "line"))}, nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory and a rename, creating missing parent directories (0o755). An
// existing file keeps its permission bits; a new one gets perm.
func writeAtomic(path string, data []byte, perm fs.FileMode) (err error) {
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
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
