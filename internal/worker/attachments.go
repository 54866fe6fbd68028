package worker

import (
	"errors"
	"net/http"
	"path/filepath"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/modelimage"
	"github.com/talkide/platform/internal/tools"
)

// handleAttach stores an attached file in the conversation's workspace,
// under attachments/, through the same confinement as the file tools.
func (w *Worker) handleAttach(rw http.ResponseWriter, r *http.Request, body []byte) error {
	name, err := workspaceQuery(r, "name")
	if err != nil {
		return err
	}
	if err := contract.ValidateAttachmentName(name); err != nil {
		return err
	}
	if len(body) == 0 {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "the attachment is empty")
	}
	s, err := w.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	ws, err := tools.NewWorkspace(filepath.Join(s.cfg.workspaces, s.id))
	if err != nil {
		return err
	}
	defer ws.Close()
	p, err := ws.Store(contract.AttachmentsDir, func(n int) string { return contract.AttachmentCandidate(name, n) }, body)
	switch {
	case errors.Is(err, tools.ErrNotAFile):
		return httpapi.Errorf(http.StatusUnprocessableEntity, contract.CodeNotAFile,
			"the workspace's %s is not a directory (a symbolic link or a file); attachments are not written through it", contract.AttachmentsDir)
	case errors.Is(err, tools.ErrOutsideWorkspace):
		return httpapi.Errorf(http.StatusForbidden, contract.CodeOutsideWorkspace, "the workspace's %s leads outside it", contract.AttachmentsDir)
	case errors.Is(err, tools.ErrNameTaken):
		return httpapi.Errorf(http.StatusConflict, contract.CodeConflict, "%s: %v", name, err)
	case err != nil:
		return err
	}
	out := contract.Attachment{Path: p, Size: int64(len(body))}
	out.MediaType, _ = modelimage.Sniff(body)
	s.log.Info("attachment stored", "path", p, "bytes", len(body), "image", out.MediaType)
	httpapi.WriteJSON(rw, http.StatusCreated, out)
	return nil
}
