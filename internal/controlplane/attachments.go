package controlplane

import (
	"errors"
	"mime"
	"net/http"
	"net/url"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// attachPattern is the browser endpoint that stores an attached file in
// a conversation's workspace: POST ?name=NAME with the file's bytes as an
// application/octet-stream body. That type, like JSON, is not one a
// cross-site form can send without a preflight, so it guards against
// request forgery as the JSON bodies of the other endpoints do.
const attachPattern = "POST /api/conversations/{id}/attachments"

// octetBody refuses an attachment sent as anything but
// application/octet-stream.
func octetBody(r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/octet-stream" {
		return httpapi.Errorf(http.StatusUnsupportedMediaType, contract.CodeBadRequest, "an attachment must be sent as Content-Type: application/octet-stream")
	}
	return nil
}

// handleAttach checks the name and the caller, reads the bounded body and
// forwards it to the worker, which stores it confined to the workspace.
func (s *Server) handleAttach(w http.ResponseWriter, r *http.Request) error {
	if err := octetBody(r); err != nil {
		return err
	}
	q, err := contract.ParseViewQuery(r.URL.RawQuery, "name")
	if err != nil {
		return err
	}
	name := q.Get("name")
	if err := contract.ValidateAttachmentName(name); err != nil {
		return err
	}
	c, wc, err := s.conversationWorker(r)
	if err != nil {
		return err
	}
	if !auth.CallerOf(r).CanSend(c) {
		return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "only the conversation's owner attaches files to it")
	}
	body, release, err := httpapi.ReadBodyIn(w, r, contract.MaxAttachmentBytes, s.uploads, userOf(r))
	if err != nil {
		s.uploadRefused(err, false)
		return err
	}
	// The bytes are held until the worker has them all: the room goes
	// back when the handler returns.
	defer release()
	var out contract.Attachment
	status, err := wc.doBody(r.Context(), http.MethodPost, contract.AttachmentsPath, c.ID, url.Values{"name": {name}}, "application/octet-stream", body, 1<<20, &out)
	if err != nil {
		s.uploadRefused(err, true)
		return workerFailure(err)
	}
	s.log.Info("attachment stored", "conversation", c.ID, "user", userOf(r), "bytes", out.Size, "image", out.MediaType)
	httpapi.WriteJSON(w, status, out)
	return nil
}

// uploadRefused counts err when it refused an attached file for want of
// room: the worker's refusal as "worker", this replica's by its status (a
// user's share is 429, the whole room 503).
func (s *Server) uploadRefused(err error, byWorker bool) {
	he, ok := errors.AsType[*httpapi.Error](err)
	if !ok || he.Code != contract.CodeTooManyUploads || s.cfg.UploadMetrics == nil {
		return
	}
	limit := "total"
	switch {
	case byWorker:
		limit = "worker"
	case he.Status == http.StatusTooManyRequests:
		limit = "user"
	}
	s.cfg.UploadMetrics.UploadRefused(limit)
}
