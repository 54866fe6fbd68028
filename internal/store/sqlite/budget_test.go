package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/budget/budgettest"
)

func TestBudgetConformance(t *testing.T) {
	paths := map[budget.Store]string{} // the suite's subtests run one at a time
	budgettest.Run(t, func(t *testing.T) budget.Store {
		path := filepath.Join(t.TempDir(), "talkide.db")
		s := open(t, path)
		paths[s] = path
		return s
	}, func(t *testing.T, s budget.Store) budget.Store {
		return open(t, paths[s]) // a second process on the same file
	})
}

func TestBudgetConformanceMemory(t *testing.T) {
	budgettest.Run(t, func(t *testing.T) budget.Store { return open(t, ":memory:") }, nil)
}
