// Package linediff computes line diffs as hunks with line numbers and
// context, for showing people what changed in a file.
package linediff

import (
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/talkide/platform/internal/contract"
)

// Hunks returns the changes from old to new, line by line, as hunks with
// context lines of context around each change (hunks whose context would
// touch are merged). Identical texts have no hunks. A line's text is
// without its "\n"; a last line that gains or loses its newline shows as
// removed and added.
//
// The matching is difflib's (Python's SequenceMatcher, with its junk
// heuristic for long files): about linear on typical edits, quadratic at
// worst, so callers bound the lines (contract.MaxDiffLines).
func Hunks(old, new string, context int) []contract.DiffHunk {
	a, b := lines(old), lines(new)
	m := difflib.NewMatcher(a, b)
	var hunks []contract.DiffHunk
	for _, group := range m.GetGroupedOpCodes(context) {
		changed := false
		for _, op := range group {
			changed = changed || op.Tag != 'e'
		}
		if !changed {
			continue
		}
		first, last := group[0], group[len(group)-1]
		h := contract.DiffHunk{
			OldStart: first.I1 + 1, OldLines: last.I2 - first.I1,
			NewStart: first.J1 + 1, NewLines: last.J2 - first.J1,
		}
		for _, op := range group {
			switch op.Tag {
			case 'e':
				for i := op.I1; i < op.I2; i++ {
					h.Lines = append(h.Lines, contract.DiffLine{Kind: contract.DiffContext, OldLine: i + 1, NewLine: op.J1 + i - op.I1 + 1, Text: text(a[i])})
				}
			default: // 'r', 'd', 'i': the removed lines, then the added ones
				for i := op.I1; i < op.I2; i++ {
					h.Lines = append(h.Lines, contract.DiffLine{Kind: contract.DiffRemoved, OldLine: i + 1, Text: text(a[i])})
				}
				for j := op.J1; j < op.J2; j++ {
					h.Lines = append(h.Lines, contract.DiffLine{Kind: contract.DiffAdded, NewLine: j + 1, Text: text(b[j])})
				}
			}
		}
		hunks = append(hunks, h)
	}
	return hunks
}

// lines splits s after each "\n", keeping it, so that a last line with and
// without one differ; an empty text has no lines.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	l := strings.SplitAfter(s, "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}

func text(line string) string { return strings.TrimSuffix(line, "\n") }
