package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
)

// TestBatchErrorNamesRecord: a batch that PostgreSQL refuses in its middle
// (a NUL, which TEXT cannot hold) names the record, in the order the batch
// ran, and stores nothing.
func TestBatchErrorNamesRecord(t *testing.T) {
	ctx := t.Context()
	s := open(t, pgtest.URL(t))
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	us := []store.UsageRecord{{ID: "c", ConversationID: "c1"}, {ID: "b\x00", ConversationID: "c1"}, {ID: "a", ConversationID: "c1"}}
	err := s.RecordUsages(ctx, us)
	if err == nil || !strings.Contains(err.Error(), "record 3 usage records: usage b\x00: ") {
		t.Errorf("RecordUsages: %v, want it to name usage b\\x00", err)
	}
	if got, err := s.ListUsage(ctx, "c1"); err != nil || len(got) != 0 {
		t.Errorf("ListUsage after the failed batch: %d records, %v; want none", len(got), err)
	}

	rs := []contract.Report{{IdempotencyKey: "z", ConversationID: "c1"}, {IdempotencyKey: "k\x00", ConversationID: "c1"}, {IdempotencyKey: "a", ConversationID: "c1"}}
	_, _, err = s.AddReports(ctx, "acme", "prod", rs, t0)
	if err == nil || !strings.Contains(err.Error(), "add reports of acme/prod: report k\x00: ") {
		t.Errorf("AddReports: %v, want it to name report k\\x00", err)
	}
	if got, err := s.ListReports(ctx, "c1"); err != nil || len(got) != 0 {
		t.Errorf("ListReports after the failed batch: %d reports, %v; want none", len(got), err)
	}
}
