package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/observe"
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
	received := time.Now() // the spans' clock: the tracer's, not cfg.Now
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
		// Its trace is read where the span is, not from the store.
		rep.Traceparent = ""
		stored[i] = rep
	}
	added, dups, err := s.cfg.Store.AddReports(r.Context(), p.Tenant, p.Env, stored, s.cfg.Now().UTC())
	if err != nil {
		return err
	}
	s.traceReports(r.Context(), p, batch.Reports, added, received)
	httpapi.WriteJSON(w, http.StatusOK, contract.ReportAck{Accepted: len(added), Duplicates: dups})
	return nil
}

// traceReports records a span for each report of rs the store added (the
// indexes in added), from the batch's receipt to its storage: a duplicate
// was traced when it was first stored. A span is the child of the one the
// worker made the report under, however long ago that span ended, so that
// the report is in its turn's trace and kept or dropped with it; a report
// without a traceparent it can read gets a trace of its own. The worker's
// signature covers the traceparent, so it is trusted as the report is. The
// span names the report's kind and ids, never its text (an activity, a
// turn's reply).
func (s *Server) traceReports(ctx context.Context, p trust.Principal, rs []contract.Report, added []int, received time.Time) {
	if s.tracer == nil {
		return
	}
	stored := time.Now()
	for _, i := range added {
		rep := rs[i]
		parent := ctx
		if len(rep.Traceparent) <= contract.MaxTraceparent {
			parent = observe.ContinueTraceparent(ctx, rep.Traceparent)
		}
		attrs := []attribute.KeyValue{observe.ReportKind.String(rep.Kind),
			observe.Tenant.String(p.Tenant), observe.Env.String(p.Env), observe.Conversation.String(rep.ConversationID)}
		if rep.TurnID != "" {
			attrs = append(attrs, observe.Turn.String(rep.TurnID))
		}
		_, span := s.tracer.Start(parent, "report "+rep.Kind, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithTimestamp(received), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(stored))
	}
}

func unixTime(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
