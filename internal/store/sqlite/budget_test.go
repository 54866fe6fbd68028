package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/budget/budgettest"
)

// TestBudgetConformance: the second store on the file is a second process.
func TestBudgetConformance(t *testing.T) {
	budgettest.RunOn(t, func(t *testing.T) string { return filepath.Join(t.TempDir(), "talkide.db") }, open)
}

func TestBudgetConformanceMemory(t *testing.T) {
	budgettest.Run(t, func(t *testing.T) budget.Store { return open(t, ":memory:") }, nil)
}
