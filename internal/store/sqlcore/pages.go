package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/talkide/platform/internal/store"
)

// Pages of a tenant's reports and usage, newest first, by keyset: a page
// starts strictly after the position the previous one ended at, so rows
// arriving meanwhile neither repeat nor shift a page. Every filter is a
// parameter ("" matches all), so each query is one statement.

func reportPage(d Dialect) string {
	return `SELECT tenant, env, time, body, received_at FROM reports
	WHERE tenant = $1 AND ($2 = '' OR env = $2) AND ($3 = '' OR conversation_id = $3) AND ($4 = '' OR kind = $4)
	AND (time < $5 OR (time = $5 AND (env` + d.ByBytes + ` < $6 OR (env = $6 AND idempotency_key` + d.ByBytes + ` < $7))))
	ORDER BY time DESC, env` + d.ByBytes + ` DESC, idempotency_key` + d.ByBytes + ` DESC LIMIT $8`
}

func usagePage(d Dialect) string {
	return `SELECT ` + usageColumns + ` FROM usage_records
	WHERE tenant = $1 AND ($2 = '' OR env = $2) AND ($3 = '' OR conversation_id = $3)
	AND (started_at < $4 OR (started_at = $4 AND (env` + d.ByBytes + ` < $5 OR (env = $5 AND id` + d.ByBytes + ` < $6))))
	ORDER BY started_at DESC, env` + d.ByBytes + ` DESC, id` + d.ByBytes + ` DESC LIMIT $7`
}

// pageStart is where a page begins: after q.Before, else after everything.
func pageStart(q store.PageQuery) (at int64, env, key string, err error) {
	if q.Tenant == "" || q.Limit < 1 {
		return 0, "", "", errors.New("a page needs a tenant and a limit of at least 1")
	}
	if q.Before == nil {
		return math.MaxInt64, "", "", nil
	}
	return Millis(q.Before.Time), q.Before.Env, q.Before.Key, nil
}

// ListReportPage implements store.Store. One row more than the page is
// read to learn whether another page follows.
func (t *Tables) ListReportPage(ctx context.Context, q store.PageQuery) (store.ReportPage, error) {
	at, env, key, err := pageStart(q)
	if err != nil {
		return store.ReportPage{}, fmt.Errorf("%s: list reports: %w", t.name, err)
	}
	rs, err := collect(ctx, t.db, scanReport, reportPage(t.d), q.Tenant, q.Env, q.ConversationID, q.Kind, at, env, key, q.Limit+1)
	if err != nil {
		return store.ReportPage{}, fmt.Errorf("%s: list reports of %s: %w", t.name, q.Tenant, err)
	}
	page := store.ReportPage{}
	page.Reports, page.Next = cutPage(rs, q.Limit, func(last store.StoredReport) store.PagePosition {
		return store.PagePosition{Time: last.Report.Time, Env: last.Env, Key: last.Report.IdempotencyKey}
	})
	return page, nil
}

// ListUsagePage implements store.Store, as ListReportPage.
func (t *Tables) ListUsagePage(ctx context.Context, q store.PageQuery) (store.UsagePage, error) {
	at, env, key, err := pageStart(q)
	if err != nil {
		return store.UsagePage{}, fmt.Errorf("%s: list usage: %w", t.name, err)
	}
	us, err := collect(ctx, t.db, scanUsage, usagePage(t.d), q.Tenant, q.Env, q.ConversationID, at, env, key, q.Limit+1)
	if err != nil {
		return store.UsagePage{}, fmt.Errorf("%s: list usage of %s: %w", t.name, q.Tenant, err)
	}
	page := store.UsagePage{}
	page.Usage, page.Next = cutPage(us, q.Limit, func(last store.UsageRecord) store.PagePosition {
		return store.PagePosition{Time: last.StartedAt, Env: last.Env, Key: last.ID}
	})
	return page, nil
}

// cutPage cuts rows, read with one row more than a page of limit holds, to
// the page; next is where the following page starts, at the position of
// the page's last row, or nil when the extra row was not there.
func cutPage[T any](rows []T, limit int, position func(last T) store.PagePosition) (page []T, next *store.PagePosition) {
	if len(rows) <= limit {
		return rows, nil
	}
	page = rows[:limit]
	pos := position(page[limit-1])
	return page, &pos
}
