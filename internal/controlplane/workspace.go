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
		"/api/conversations/{id}/workspace/list": viewHandler[contract.WorkspaceListing](s, contract.WorkspaceListPath, "path", anyPath, nil),
		"/api/conversations/{id}/workspace/file": viewHandler(s, contract.WorkspaceFilePath, "path", filePath, fileDownload),
		"/api/conversations/{id}/workspace/diff": viewHandler[contract.WorkspaceDiff](s, contract.WorkspaceDiffPath, "path", filePath, nil),
		"/api/conversations/{id}/tool-output":    viewHandler(s, contract.ToolOutputPath, "name", outputName, outputDownload),
	} {
		mux.Handle("GET "+p, h(s.browser(f)))
		mux.Handle(p, httpapi.MethodNotAllowed(s.log, http.MethodGet))
	}
}

// download is what a download of an answer T saves: a file name, whether
// it is text, its bytes. A nil download means the endpoint offers none.
type download[T any] func(T) (name string, text bool, data []byte)

// viewHandler answers a workspace request: it checks the query (param, by
// check, and download=1 where the endpoint offers one), forwards the
// checked value to the worker at workerPath, and answers the worker's T as
// JSON or as a download.
func viewHandler[T any](s *Server, workerPath, param string, check func(string) (string, error), dl download[T]) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		allowed := []string{param}
		if dl != nil {
			allowed = append(allowed, "download")
		}
		q, err := contract.ParseViewQuery(r.URL.RawQuery, allowed...)
		if err != nil {
			return err
		}
		var asFile bool
		switch d := q.Get("download"); d {
		case "", "0":
		case "1":
			asFile = true
		default:
			return badQuery("download %.16q: want 1 or 0", d)
		}
		v, err := check(q.Get(param))
		if err != nil {
			return err
		}
		c, wc, err := s.conversationWorker(r)
		if err != nil {
			return err
		}
		var out T
		if _, err := wc.doQuery(r.Context(), http.MethodGet, workerPath, c.ID, url.Values{param: {v}}, contract.MaxWorkspaceAnswer, nil, &out); err != nil {
			return workerFailure(err)
		}
		if asFile {
			name, text, data := dl(out)
			writeDownload(w, name, text, data)
			return nil
		}
		httpapi.WriteJSON(w, http.StatusOK, out)
		return nil
	}
}

func anyPath(p string) (string, error) { return contract.ValidateWorkspacePath("path", p) }

func filePath(p string) (string, error) {
	p, err := anyPath(p)
	if err == nil && p == "." {
		err = badQuery("path: name a file of the workspace")
	}
	return p, err
}

func outputName(name string) (string, error) { return name, contract.ValidateToolOutputName(name) }

func fileDownload(f contract.WorkspaceFile) (string, bool, []byte) {
	if f.Binary {
		return path.Base(f.Path), false, f.Data
	}
	return path.Base(f.Path), true, []byte(f.Content)
}

func outputDownload(o contract.ToolOutput) (string, bool, []byte) {
	return o.Name, true, []byte(o.Content)
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
