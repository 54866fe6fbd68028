package postgres

import (
	"testing"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/budget/budgettest"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
)

func TestBudgetConformance(t *testing.T) {
	urls := map[budget.Store]string{} // the suite's subtests run one at a time
	budgettest.Run(t, func(t *testing.T) budget.Store {
		url := pgtest.URL(t)
		s := open(t, url)
		urls[s] = url
		return s
	}, func(t *testing.T, s budget.Store) budget.Store {
		return open(t, urls[s]) // a second replica on the same database
	})
}
