package cli

import (
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	var b strings.Builder
	tb := Table{Head: []string{"NAME", "N", "NOTE"}, Right: []bool{1: true}}
	tb.Add("a", "1,000", "x")
	tb.Add("longer", "7", "")
	tb.Write(&b)
	want := "NAME        N  NOTE\na       1,000  x\nlonger      7\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
