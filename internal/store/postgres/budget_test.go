package postgres

import (
	"testing"

	"github.com/talkide/platform/internal/budget/budgettest"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
)

// TestBudgetConformance: the second store on the database is a second
// replica.
func TestBudgetConformance(t *testing.T) {
	budgettest.RunOn(t, func(t *testing.T) string { return pgtest.URL(t) }, open)
}
