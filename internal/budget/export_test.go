package budget

import "testing"

// SetReportPage makes reports read n ledger entries at a time until t ends.
func SetReportPage(t *testing.T, n int) {
	old := reportPage
	reportPage = n
	t.Cleanup(func() { reportPage = old })
}

// WaitGrowths waits for the slices growing in the background.
func (s *Service) WaitGrowths() { s.growers.Wait() }
