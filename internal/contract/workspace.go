package contract

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Workspace paths (control-plane → worker, signed like every command): a
// read-only view of a conversation's working tree and of the outputs its
// tools kept, for the browser. Each takes the file in the query (?path= or
// ?name=), never in the URL's path, so that no router cleans it first.
const (
	WorkspaceListPath = "/v1/sessions/{id}/workspace/list" // GET ?path=DIR: a directory's entries
	WorkspaceFilePath = "/v1/sessions/{id}/workspace/file" // GET ?path=FILE: a file's content
	WorkspaceDiffPath = "/v1/sessions/{id}/workspace/diff" // GET ?path=FILE: what the conversation changed in it
	ToolOutputPath    = "/v1/sessions/{id}/tool-output"    // GET ?name=ID.txt: an output kept whole on the session volume
)

// Bounds of the workspace view.
const (
	// MaxWorkspacePath bounds a path parameter, in bytes.
	MaxWorkspacePath = 4096
	// MaxListEntries bounds the entries of one listing.
	MaxListEntries = 1000
	// MaxFileView bounds a file's bytes in a WorkspaceFile (and each side
	// of a diff): larger ones are refused with CodeFileTooLarge.
	MaxFileView = 1 << 20
	// MaxToolOutputView bounds what a ToolOutput carries of a kept output,
	// which may be up to 64 MiB: its first MaxToolOutputView bytes.
	MaxToolOutputView = 1 << 20
	// MaxDiffLines bounds the lines of each side of a diff.
	MaxDiffLines = 20000
	// MaxWorkspaceAnswer bounds a workspace answer's JSON: a file's, which
	// escapes a byte of content in at most 6, always fits; a diff that
	// would not is refused with CodeFileTooLarge.
	MaxWorkspaceAnswer = 6*MaxFileView + 64<<10
)

// Error codes of the workspace view.
const (
	// CodeOutsideWorkspace: the path leads outside the conversation's
	// workspace (a "..", an absolute path, a symlink out); 403.
	CodeOutsideWorkspace = "outside_workspace"
	// CodeFileTooLarge: the file is larger than the view shows; 413, the
	// message names its size.
	CodeFileTooLarge = "file_too_large"
	// CodeNotAFile: a directory, device, FIFO or hard-linked file where a
	// file was asked for, or a file where a directory was; 422.
	CodeNotAFile = "not_a_file"
)

// Kinds of a WorkspaceEntry.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	EntryOther   = "other"
)

// WorkspaceEntry is one entry of a WorkspaceListing.
type WorkspaceEntry struct {
	Name    string    `json:"name"`
	Kind    string    `json:"kind"`           // EntryFile, EntryDir, EntrySymlink or EntryOther
	Size    int64     `json:"size,omitempty"` // bytes of a file
	ModTime time.Time `json:"mtime"`
	// Target is where a symlink leads, relative to the workspace root,
	// when that is inside it; TargetKind is what is there (EntryFile,
	// EntryDir), empty when nothing is. A symlink that leads out of the
	// workspace has Outside set and no target: where it leads is not the
	// browser's business.
	Target     string `json:"target,omitempty"`
	TargetKind string `json:"target_kind,omitempty"`
	Outside    bool   `json:"outside,omitempty"`
}

// WorkspaceListing answers WorkspaceListPath: the directory's entries,
// directories first, then by name; at most MaxListEntries of them
// (Truncated when there were more).
type WorkspaceListing struct {
	Path      string           `json:"path"` // "." for the root
	Entries   []WorkspaceEntry `json:"entries"`
	Truncated bool             `json:"truncated,omitempty"`
}

// WorkspaceFile answers WorkspaceFilePath. A text file (valid UTF-8 with
// no NUL in its first 8 KiB) has Content; a binary one has Binary set and
// its bytes in Data (base64 in JSON).
type WorkspaceFile struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	Binary  bool      `json:"binary,omitempty"`
	Content string    `json:"content,omitempty"`
	Data    []byte    `json:"data,omitempty"`
}

// Kinds of a DiffLine.
const (
	DiffContext = "context"
	DiffAdded   = "added"
	DiffRemoved = "removed"
)

// DiffLine is one line of a hunk: OldLine and NewLine are its 1-based line
// numbers in the original and in the current file, 0 on the side it is
// not on.
type DiffLine struct {
	Kind    string `json:"kind"`
	OldLine int    `json:"old_line,omitempty"`
	NewLine int    `json:"new_line,omitempty"`
	Text    string `json:"text"`
}

// DiffHunk is a run of changes with the lines of context around them.
type DiffHunk struct {
	OldStart int        `json:"old_start"`
	OldLines int        `json:"old_lines"`
	NewStart int        `json:"new_start"`
	NewLines int        `json:"new_lines"`
	Lines    []DiffLine `json:"lines"`
}

// WorkspaceDiff answers WorkspaceDiffPath: the file as it is now against
// the file as it was before the conversation's file tools first changed
// it. Created: it did not exist then; Deleted: it does not exist now.
// Binary files have no hunks.
type WorkspaceDiff struct {
	Path    string     `json:"path"`
	Created bool       `json:"created,omitempty"`
	Deleted bool       `json:"deleted,omitempty"`
	Binary  bool       `json:"binary,omitempty"`
	Context int        `json:"context"` // lines of context around each change
	Hunks   []DiffHunk `json:"hunks"`
}

// ToolOutput answers ToolOutputPath: the first MaxToolOutputView bytes of
// an output kept whole (Truncated when it holds more), as text with
// invalid UTF-8 replaced.
type ToolOutput struct {
	Name      string    `json:"name"`
	Size      int64     `json:"size"`
	ModTime   time.Time `json:"mtime"`
	Content   string    `json:"content"`
	Truncated bool      `json:"truncated,omitempty"`
}

// ErrInvalidPath is the sentinel of a FieldError for a workspace path or a
// tool output's name that breaks the rules.
var ErrInvalidPath = errors.New("invalid workspace path")

// ValidateWorkspacePath checks a workspace path as the browser sends it: a
// relative, "/"-separated path of at most MaxWorkspacePath bytes of valid
// UTF-8 with no control character, no backslash and no "." or ".."
// component ("." alone is the root). It returns the path without a
// trailing "/". This is the seam's first refusal; the worker still resolves
// every path through the file tools' confinement, which is what holds.
func ValidateWorkspacePath(field, p string) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", Invalid(ErrInvalidPath, field, format, args...)
	}
	switch {
	case p == "" || p == ".":
		return ".", nil
	case len(p) > MaxWorkspacePath:
		return bad("is longer than %d bytes", MaxWorkspacePath)
	case !utf8.ValidString(p):
		return bad("is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return bad("is absolute; give a path relative to the workspace root")
	case strings.ContainsRune(p, '\\'):
		return bad("contains a backslash; separate directories with \"/\"")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	p = strings.TrimSuffix(p, "/")
	for _, el := range strings.Split(p, "/") {
		switch el {
		case "":
			return bad("has an empty component (\"//\")")
		case ".", "..":
			return bad("has a %q component; give a path inside the workspace", el)
		}
	}
	return p, nil
}

// ValidateToolOutputName checks the name of a kept output: the name the
// tools give it (letters, digits, '-' and '_', then ".txt"), at most 204
// bytes.
func ValidateToolOutputName(name string) error {
	base, ok := strings.CutSuffix(name, ".txt")
	if !ok || base == "" || len(base) > 200 {
		return Invalid(ErrInvalidPath, "name", "%s: want the name of a kept output, <call id>.txt", quoteShort(name))
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return Invalid(ErrInvalidPath, "name", "%s: want the name of a kept output, <call id>.txt", quoteShort(name))
		}
	}
	return nil
}

// MaxViewQuery bounds the raw query string of a workspace request: a
// longest path, every byte of it percent-encoded, and a few parameters.
const MaxViewQuery = 3*MaxWorkspacePath + 256

// ParseViewQuery parses the raw query string of a workspace request,
// refusing a malformed or overlong one, a parameter not in allowed and a
// parameter given twice.
func ParseViewQuery(raw string, allowed ...string) (url.Values, error) {
	if len(raw) > MaxViewQuery {
		return nil, Invalid(ErrInvalidPath, "query", "is longer than %d bytes", MaxViewQuery)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, Invalid(ErrInvalidPath, "query", "is malformed: %v", err)
	}
	for k, v := range q {
		if !slices.Contains(allowed, k) {
			return nil, Invalid(ErrInvalidPath, "query", "has the unknown parameter %s; this endpoint takes %s", quoteShort(k), strings.Join(allowed, ", "))
		}
		if len(v) > 1 {
			return nil, Invalid(ErrInvalidPath, "query", "gives %s %d times; give it once", quoteShort(k), len(v))
		}
	}
	return q, nil
}

// quoteShort quotes at most 64 bytes of s, for a message.
func quoteShort(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
