package controlplane

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// reportKey returns the signing key of a tenant-env under the master
// secret the signature names (kid), while that secret is not retired. It
// derives the key for any name without touching the store, so an unsigned
// request costs no database read; the handler checks that the env exists
// once the signature has proved who is asking.
func (s *Server) reportKey(tenant, env, kid string) ([]byte, bool) {
	master, err := s.cfg.Commands.Verifying(kid, s.cfg.Now())
	if err != nil {
		return nil, false
	}
	return trust.DeriveEnvKey(master, tenant, env), true
}

func (s *Server) handleReports(w http.ResponseWriter, r *http.Request) error {
	var batch contract.ReportBatch
	p, err := s.verifyWorkerJSON(w, r, contract.MaxReportBatch, &batch)
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	now := s.cfg.Now()
	for i, rep := range batch.Reports {
		if err := rep.Validate(now); err != nil {
			if fe, ok := errors.AsType[*contract.FieldError](err); ok {
				return fe.Rename(fmt.Sprintf("reports[%d].%s", i, fe.Field))
			}
			return err
		}
		if owned[rep.ConversationID] {
			continue
		}
		c, err := s.cfg.Store.GetConversation(r.Context(), rep.ConversationID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err != nil || c.Tenant != p.Tenant || c.Env != p.Env {
			return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "report %d: conversation %s does not belong to %s/%s", i, rep.ConversationID, p.Tenant, p.Env)
		}
		owned[rep.ConversationID] = true
	}
	// A turn's reply is kept where the search reads it, not twice: the
	// report itself is stored without it.
	stored := make([]contract.Report, len(batch.Reports))
	for i, rep := range batch.Reports {
		if rep.Kind == contract.ReportTurnEnded {
			if err := s.turnEnded(r.Context(), rep); err != nil {
				return err
			}
			rep.Reply = nil
		}
		stored[i] = rep
	}
	accepted, dups, err := s.cfg.Store.AddReports(r.Context(), p.Tenant, p.Env, stored, s.cfg.Now().UTC())
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, contract.ReportAck{Accepted: accepted, Duplicates: dups})
	return nil
}

func unixTime(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
