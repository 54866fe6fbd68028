package controlplane

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// The workspace view on the browser API: a conversation's files, what it
// changed in them, and the outputs its tools kept, read from the worker
// that holds the conversation, for whoever may see the conversation. The
// control-plane checks every parameter before it asks the worker, and the
// worker checks them again and confines every path as the file tools do.

// registerWorkspace adds the workspace view's browser endpoints to mux.
func (s *Server) registerWorkspace(mux *http.ServeMux, h func(httpapi.HandlerFunc) http.Handler) {
	for p, f := range map[string]httpapi.HandlerFunc{
		"/api/conversations/{id}/workspace/list": s.handleWorkspaceList,
		"/api/conversations/{id}/workspace/file": s.handleWorkspaceFile,
		"/api/conversations/{id}/workspace/diff": s.handleWorkspaceDiff,
		"/api/conversations/{id}/tool-output":    s.handleToolOutput,
	} {
		mux.Handle("GET "+p, h(s.browser(f)))
		mux.Handle(p, httpapi.MethodNotAllowed(s.log, http.MethodGet))
	}
}

// viewQuery reads a workspace request's query: param and, when
// downloadable, download=1; nothing else.
func viewQuery(r *http.Request, param string, downloadable bool) (value string, download bool, err error) {
	allowed := []string{param}
	if downloadable {
		allowed = append(allowed, "download")
	}
	q, err := contract.ParseViewQuery(r.URL.RawQuery, allowed...)
	if err != nil {
		return "", false, err
	}
	switch d := q.Get("download"); d {
	case "", "0":
	case "1":
		download = true
	default:
		return "", false, badQuery("download %.16q: want 1 or 0", d)
	}
	return q.Get(param), download, nil
}

// workspacePath reads and checks the path parameter of a workspace request.
func workspacePath(r *http.Request, downloadable bool) (string, bool, error) {
	raw, download, err := viewQuery(r, "path", downloadable)
	if err != nil {
		return "", false, err
	}
	p, err := contract.ValidateWorkspacePath("path", raw)
	return p, download, err
}

// forward asks the conversation's worker for a workspace answer.
func (s *Server) forward(r *http.Request, workerPath string, query url.Values, out any) error {
	c, wc, err := s.conversationWorker(r)
	if err != nil {
		return err
	}
	if _, err := wc.doQuery(r.Context(), http.MethodGet, workerPath, c.ID, query, contract.MaxWorkspaceAnswer, nil, out); err != nil {
		return workerFailure(err)
	}
	return nil
}

func (s *Server) handleWorkspaceList(w http.ResponseWriter, r *http.Request) error {
	p, _, err := workspacePath(r, false)
	if err != nil {
		return err
	}
	var out contract.WorkspaceListing
	if err := s.forward(r, contract.WorkspaceListPath, url.Values{"path": {p}}, &out); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleWorkspaceFile(w http.ResponseWriter, r *http.Request) error {
	p, download, err := workspacePath(r, true)
	if err != nil {
		return err
	}
	if p == "." {
		return badQuery("path: name a file of the workspace")
	}
	var out contract.WorkspaceFile
	if err := s.forward(r, contract.WorkspaceFilePath, url.Values{"path": {p}}, &out); err != nil {
		return err
	}
	if download {
		data := []byte(out.Content)
		if out.Binary {
			data = out.Data
		}
		writeDownload(w, path.Base(p), !out.Binary, data)
		return nil
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleWorkspaceDiff(w http.ResponseWriter, r *http.Request) error {
	p, _, err := workspacePath(r, false)
	if err != nil {
		return err
	}
	if p == "." {
		return badQuery("path: name a file of the workspace")
	}
	var out contract.WorkspaceDiff
	if err := s.forward(r, contract.WorkspaceDiffPath, url.Values{"path": {p}}, &out); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleToolOutput(w http.ResponseWriter, r *http.Request) error {
	name, download, err := viewQuery(r, "name", true)
	if err != nil {
		return err
	}
	if err := contract.ValidateToolOutputName(name); err != nil {
		return err
	}
	var out contract.ToolOutput
	if err := s.forward(r, contract.ToolOutputPath, url.Values{"name": {name}}, &out); err != nil {
		return err
	}
	if download {
		writeDownload(w, name, true, []byte(out.Content))
		return nil
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// writeDownload answers a download of data as the file name: an
// attachment, text/plain or application/octet-stream, never sniffed, so
// that a browser saves it and never renders it (an HTML file the agent
// wrote must not run as a page of this origin). name is a path's last
// component as the contract allows it (no control character, no "/");
// mime.FormatMediaType quotes it, or encodes it per RFC 2231 when it is
// not ASCII.
func writeDownload(w http.ResponseWriter, name string, text bool, data []byte) {
	hdr := w.Header()
	if text {
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		hdr.Set("Content-Type", "application/octet-stream")
	}
	disposition := mime.FormatMediaType("attachment", map[string]string{"filename": name})
	if disposition == "" { // a name FormatMediaType cannot express
		disposition = "attachment"
	}
	hdr.Set("Content-Disposition", disposition)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	hdr.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}
