package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// EditInput is the input of Edit.
type EditInput struct {
	FilePath   string `json:"file_path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// maxEditFileBytes bounds the size of a file Edit loads.
const maxEditFileBytes = 16 << 20

// snippetContext is how many lines around an edit its confirmation shows.
const snippetContext = 3

const editDescription = `Replaces exact text in a file in the workspace.

- old_string must match the file exactly, including whitespace and indentation, and must occur exactly once; include enough surrounding lines to make it unique, or set replace_all to replace every occurrence (useful for renaming).
- Copy old_string from the Read output without the line-number prefix (everything up to and including the tab).
- new_string must differ from old_string. An empty old_string on a file that does not exist creates it with new_string as content.
- The write is atomic and keeps the file's permissions. The result shows the edited lines.`

// Edit replaces text in a file.
type Edit struct{}

func (*Edit) Name() string        { return "Edit" }
func (*Edit) Description() string { return editDescription }

func (*Edit) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"file_path":  property("string", "The path of the file to modify, relative to the workspace root or absolute inside it"),
		"old_string": property("string", "The text to replace"),
		"new_string": property("string", "The text to replace it with (must be different from old_string)"),
		"replace_all": map[string]any{
			"type":        "boolean",
			"default":     false,
			"description": "Replace all occurrences of old_string (default false)",
		},
	}, "file_path", "old_string", "new_string")
}

func (*Edit) Run(ctx context.Context, call Call) (Result, error) {
	var in EditInput
	if res, done, err := begin(ctx, call, &in, "file_path", "old_string", "new_string"); done {
		return res, err
	}
	if in.OldString == in.NewString {
		return errorResult("old_string and new_string are identical; there is nothing to change"), nil
	}
	ws := call.Workspace
	path, err := ws.Resolve(in.FilePath)
	if err != nil {
		return errorResult("Cannot edit %v", err), nil
	}
	rel := ws.Rel(path)

	f, fi, err := ws.openRegular(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if in.OldString != "" {
			return errorResult("File does not exist: %s. To create it, use Write (or Edit with an empty old_string)", rel), nil
		}
		ws.keepOriginal(call.StateDir, path)
		if _, err := ws.writeFile(path, []byte(in.NewString), 0o644); err != nil {
			return writeError("Cannot create", rel, err), nil
		}
		return Result{Output: fmt.Sprintf("Created %s (%s, %s)", rel,
			plural(len(in.NewString), "byte"), plural(countLines(in.NewString), "line"))}, nil
	case errors.Is(err, ErrOutsideWorkspace):
		return errorResult("Cannot edit %v", err), nil
	case err != nil:
		return errorResult("Cannot edit %s: %v", rel, err), nil
	}
	defer f.Close()
	if fi.Size() > maxEditFileBytes {
		return errorResult("Cannot edit %s: the file is %d bytes, more than Edit handles (%d); use Bash", rel, fi.Size(), maxEditFileBytes), nil
	}
	data, err := readLimited(f, fi.Size(), maxEditFileBytes)
	if errors.Is(err, errTooLarge) { // it grew since the fstat
		return errorResult("Cannot edit %s: the file is larger than Edit handles (%d bytes); use Bash", rel, maxEditFileBytes), nil
	}
	if err != nil {
		return errorResult("Cannot edit %s: %v", rel, err), nil
	}
	if bytes.IndexByte(data[:min(len(data), binarySniffBytes)], 0) >= 0 {
		return errorResult("Cannot edit %s: it is a binary file", rel), nil
	}
	content := string(data)

	if in.OldString == "" {
		if content != "" {
			return errorResult("old_string is empty but %s already exists and is not empty; give the text to replace, or use Write to replace the whole file", rel), nil
		}
		ws.keepOriginal(call.StateDir, path)
		if _, err := ws.writeFile(path, []byte(in.NewString), fi.Mode().Perm()); err != nil {
			return writeError("Cannot edit", rel, err), nil
		}
		return Result{Output: fmt.Sprintf("Wrote %s to the empty file %s", plural(len(in.NewString), "byte"), rel)}, nil
	}

	count := strings.Count(content, in.OldString)
	switch {
	case count == 0:
		msg := fmt.Sprintf("old_string was not found in %s. It must match the file exactly, including whitespace and indentation; Read the file to see its current content.", rel)
		if strings.Contains(content, "\r\n") && !strings.Contains(in.OldString, "\r\n") && strings.Contains(in.OldString, "\n") {
			msg += " Note: the file has CRLF (\\r\\n) line endings."
		}
		return errorResult("%s", msg), nil
	case count > 1 && !in.ReplaceAll:
		return errorResult("old_string occurs %d times in %s, but must occur exactly once. Include more surrounding context to make it unique, or set replace_all to true to replace every occurrence.", count, rel), nil
	}
	first := strings.Index(content, in.OldString)
	var updated string
	if in.ReplaceAll {
		updated = strings.ReplaceAll(content, in.OldString, in.NewString)
	} else {
		updated = content[:first] + in.NewString + content[first+len(in.OldString):]
	}
	ws.keepOriginal(call.StateDir, path)
	if _, err := ws.writeFile(path, []byte(updated), fi.Mode().Perm()); err != nil {
		return writeError("Cannot edit", rel, err), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Edited %s: replaced %s.", rel, plural(count, "occurrence"))
	if count > 1 {
		b.WriteString(" The first edit:")
	}
	b.WriteString("\n")
	b.WriteString(snippet(updated, first, len(in.NewString), snippetContext))
	return Result{Output: CapOutput(call, b.String(), DefaultMaxOutputBytes)}, nil
}

// snippet shows, in cat -n format, the lines of content covering
// content[at:at+n] with ctx lines of context on each side.
func snippet(content string, at, n, ctx int) string {
	startLine := strings.Count(content[:at], "\n") + 1
	endLine := startLine + strings.Count(content[at:at+n], "\n")
	from := max(1, startLine-ctx)
	to := endLine + ctx
	lines := strings.SplitAfter(content, "\n")
	var b strings.Builder
	for i := from; i <= to && i <= len(lines); i++ {
		line := strings.TrimRight(lines[i-1], "\r\n")
		if i == len(lines) && line == "" {
			break // the empty "line" after a final newline
		}
		if len(line) > MaxLineChars {
			line = headUTF8(line[:MaxLineChars]) + " [… line truncated]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i, line)
	}
	return b.String()
}
