package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/linediff"
	"github.com/talkide/platform/internal/tools"
)

// The workspace view: read-only answers about a conversation's working tree
// and the outputs its tools kept, for the browser. Every path is checked by
// the contract's rule, then resolved and opened exactly as the file tools
// do (tools.Workspace), so that what the model cannot reach with Read the
// browser cannot reach either.

// diffContext is the lines of context around each change of a diff.
const diffContext = 3

// registerWorkspace adds the workspace view's endpoints to mux, each
// answering another method with a 405.
func (w *Worker) registerWorkspace(mux *http.ServeMux) {
	for path, h := range map[string]signedHandler{
		contract.WorkspaceListPath: w.handleWorkspaceList,
		contract.WorkspaceFilePath: w.handleWorkspaceFile,
		contract.WorkspaceDiffPath: w.handleWorkspaceDiff,
		contract.ToolOutputPath:    w.handleToolOutput,
	} {
		mux.Handle("GET "+path, w.signed(h))
		mux.Handle(path, httpapi.MethodNotAllowed(w.log, http.MethodGet))
	}
}

// workspaceQuery reads the one query parameter param of a workspace
// request.
func workspaceQuery(r *http.Request, param string) (string, error) {
	q, err := contract.ParseViewQuery(r.URL.RawQuery, param)
	if err != nil {
		return "", err
	}
	return q.Get(param), nil
}

// openWorkspace returns the conversation's session and its workspace, with
// the path parameter checked; the caller closes the workspace.
func (w *Worker) openWorkspace(r *http.Request) (*session, *tools.Workspace, string, error) {
	raw, err := workspaceQuery(r, "path")
	if err != nil {
		return nil, nil, "", err
	}
	p, err := contract.ValidateWorkspacePath("path", raw)
	if err != nil {
		return nil, nil, "", err
	}
	s, err := w.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, nil, "", err
	}
	ws, err := tools.NewWorkspace(filepath.Join(s.cfg.workspaces, s.id))
	if err != nil {
		return nil, nil, "", err
	}
	return s, ws, p, nil
}

// viewError is the answer to a failure of the workspace view on p.
func viewError(p string, err error) error {
	var tooLarge *tools.TooLargeError
	switch {
	case errors.Is(err, tools.ErrOutsideWorkspace):
		return httpapi.Errorf(http.StatusForbidden, contract.CodeOutsideWorkspace, "%.200q leads outside the conversation's workspace", p)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no %.200q in the conversation's workspace", p)
	case errors.As(err, &tooLarge):
		return httpapi.Errorf(http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge,
			"%.200q is %d bytes, more than the %d bytes the view shows", p, tooLarge.Size, tooLarge.Limit)
	case errors.Is(err, syscall.ELOOP):
		return httpapi.Errorf(http.StatusUnprocessableEntity, contract.CodeNotAFile, "%.200q: a loop of symbolic links", p)
	case errors.Is(err, tools.ErrNotAFile):
		var reason string
		switch {
		case errors.Is(err, tools.ErrHardLinked):
			reason = "it has more than one hard link, and the view, like the file tools, does not read such a file"
		case errors.Is(err, tools.ErrIsDir):
			reason = "it is a directory"
		default:
			reason = "it is not a regular file"
		}
		return httpapi.Errorf(http.StatusUnprocessableEntity, contract.CodeNotAFile, "%.200q: %s", p, reason)
	}
	return err
}

func (w *Worker) handleWorkspaceList(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	_, ws, p, err := w.openWorkspace(r)
	if err != nil {
		return err
	}
	defer ws.Close()
	entries, truncated, err := ws.List(p, contract.MaxListEntries)
	if errors.Is(err, tools.ErrNotAFile) {
		return httpapi.Errorf(http.StatusUnprocessableEntity, contract.CodeNotAFile, "%.200q is not a directory", p)
	}
	if err != nil {
		return viewError(p, err)
	}
	out := contract.WorkspaceListing{Path: p, Entries: make([]contract.WorkspaceEntry, 0, len(entries)), Truncated: truncated}
	for _, e := range entries {
		out.Entries = append(out.Entries, contract.WorkspaceEntry{
			Name: e.Name, Kind: entryKind(e.Type), Size: e.Size, ModTime: e.ModTime.UTC(),
			Target: e.Target, TargetKind: targetKind(e), Outside: e.Outside,
		})
	}
	httpapi.WriteJSON(rw, http.StatusOK, out)
	return nil
}

func entryKind(t fs.FileMode) string {
	switch {
	case t.IsDir():
		return contract.EntryDir
	case t&fs.ModeSymlink != 0:
		return contract.EntrySymlink
	case t.IsRegular():
		return contract.EntryFile
	}
	return contract.EntryOther
}

func targetKind(e tools.Entry) string {
	if e.Target == "" || e.Broken {
		return ""
	}
	return entryKind(e.TargetType)
}

func (w *Worker) handleWorkspaceFile(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	_, ws, p, err := w.openWorkspace(r)
	if err != nil {
		return err
	}
	defer ws.Close()
	data, fi, err := ws.ReadFile(p, contract.MaxFileView)
	if err != nil {
		return viewError(p, err)
	}
	out := contract.WorkspaceFile{Path: p, Size: fi.Size(), ModTime: fi.ModTime().UTC()}
	if isText(data) {
		out.Content = string(data)
	} else {
		out.Binary, out.Data = true, data
	}
	httpapi.WriteJSON(rw, http.StatusOK, out)
	return nil
}

// isText reports whether data is shown as text: valid UTF-8 without a NUL
// where the file tools look for one.
func isText(data []byte) bool { return !tools.IsBinary(data) && utf8.Valid(data) }

func (w *Worker) handleWorkspaceDiff(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	s, ws, p, err := w.openWorkspace(r)
	if err != nil {
		return err
	}
	defer ws.Close()
	orig, err := ws.Original(tools.StateDirOf(s.store.Dir()), p)
	if errors.Is(err, tools.ErrNoOriginal) {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound,
			"%.200q has no original kept: the platform's Write and Edit have not changed it in this conversation (what commands, or the Claude Code harness's own tools, change is not recorded)", p)
	}
	if err != nil {
		return viewError(p, err)
	}
	if orig.TooLarge {
		return httpapi.Errorf(http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge,
			"%.200q was more than %d bytes before the conversation changed it; its original was not kept", p, tools.MaxOriginalBytes)
	}
	out := contract.WorkspaceDiff{Path: p, Created: !orig.Existed, Context: diffContext, Hunks: []contract.DiffHunk{}}
	cur, _, err := ws.ReadFile(p, contract.MaxFileView)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		out.Deleted = true
	case err != nil:
		return viewError(p, err)
	}
	if !isText(orig.Data) || !isText(cur) {
		out.Binary = true
		httpapi.WriteJSON(rw, http.StatusOK, out)
		return nil
	}
	for _, side := range [][]byte{orig.Data, cur} {
		if n := lineCount(side); n > contract.MaxDiffLines {
			return httpapi.Errorf(http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge,
				"%.200q has %d lines on one side, more than the %d a diff shows", p, n, contract.MaxDiffLines)
		}
	}
	if hunks := linediff.Hunks(string(orig.Data), string(cur), diffContext); hunks != nil {
		out.Hunks = hunks
	}
	// Both sides in full, every byte escaped, can pass what the
	// control-plane reads of an answer: refused here, with a reason,
	// rather than cut there.
	if data, err := json.Marshal(out); err != nil {
		return err
	} else if len(data) > contract.MaxWorkspaceAnswer {
		return httpapi.Errorf(http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge,
			"the diff of %.200q takes %d bytes, more than the %d the view sends", p, len(data), contract.MaxWorkspaceAnswer)
	}
	httpapi.WriteJSON(rw, http.StatusOK, out)
	return nil
}

func lineCount(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

func (w *Worker) handleToolOutput(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	name, err := workspaceQuery(r, "name")
	if err != nil {
		return err
	}
	if err := contract.ValidateToolOutputName(name); err != nil {
		return err
	}
	s, err := w.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	data, fi, err := tools.ReadToolOutput(tools.StateDirOf(s.store.Dir()), name, contract.MaxToolOutputView)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no kept output %q in this conversation", name)
	case errors.Is(err, tools.ErrNotAFile), errors.Is(err, syscall.ELOOP):
		return httpapi.Errorf(http.StatusUnprocessableEntity, contract.CodeNotAFile, "%q is not a kept output", name)
	case err != nil:
		return fmt.Errorf("kept output %s: %w", name, err)
	}
	httpapi.WriteJSON(rw, http.StatusOK, contract.ToolOutput{
		Name: name, Size: fi.Size(), ModTime: fi.ModTime().UTC(),
		Content: strings.ToValidUTF8(string(data), "\uFFFD"), Truncated: int64(len(data)) < fi.Size(),
	})
	return nil
}
