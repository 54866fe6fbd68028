package linediff

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

func TestHunks(t *testing.T) {
	ctx := func(o, n int, s string) contract.DiffLine {
		return contract.DiffLine{Kind: contract.DiffContext, OldLine: o, NewLine: n, Text: s}
	}
	add := func(n int, s string) contract.DiffLine {
		return contract.DiffLine{Kind: contract.DiffAdded, NewLine: n, Text: s}
	}
	del := func(o int, s string) contract.DiffLine {
		return contract.DiffLine{Kind: contract.DiffRemoved, OldLine: o, Text: s}
	}
	numbered := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			b.WriteString("line " + string(rune('a'+i%26)) + strings.Repeat("x", i) + "\n")
		}
		return b.String()
	}
	long := numbered(1, 20)
	longEdited := strings.Replace(long, "line k"+strings.Repeat("x", 10)+"\n", "changed\n", 1)
	for name, tc := range map[string]struct {
		old, new string
		want     []contract.DiffHunk
	}{
		"identical":  {"a\nb\n", "a\nb\n", nil},
		"both empty": {"", "", nil},
		"created":    {"", "a\nb\n", []contract.DiffHunk{{OldStart: 1, OldLines: 0, NewStart: 1, NewLines: 2, Lines: []contract.DiffLine{add(1, "a"), add(2, "b")}}}},
		"emptied":    {"a\n", "", []contract.DiffHunk{{OldStart: 1, OldLines: 1, NewStart: 1, NewLines: 0, Lines: []contract.DiffLine{del(1, "a")}}}},
		"middle line replaced": {"a\nb\nc\n", "a\nB\nc\n", []contract.DiffHunk{{OldStart: 1, OldLines: 3, NewStart: 1, NewLines: 3,
			Lines: []contract.DiffLine{ctx(1, 1, "a"), del(2, "b"), add(2, "B"), ctx(3, 3, "c")}}}},
		"line inserted": {"a\nc\n", "a\nb\nc\n", []contract.DiffHunk{{OldStart: 1, OldLines: 2, NewStart: 1, NewLines: 3,
			Lines: []contract.DiffLine{ctx(1, 1, "a"), add(2, "b"), ctx(2, 3, "c")}}}},
		"newline at end added": {"a", "a\n", []contract.DiffHunk{{OldStart: 1, OldLines: 1, NewStart: 1, NewLines: 1,
			Lines: []contract.DiffLine{del(1, "a"), add(1, "a")}}}},
		"context bounded in a long file": {long, longEdited, []contract.DiffHunk{{OldStart: 7, OldLines: 7, NewStart: 7, NewLines: 7,
			Lines: []contract.DiffLine{
				ctx(7, 7, "line h"+strings.Repeat("x", 7)), ctx(8, 8, "line i"+strings.Repeat("x", 8)), ctx(9, 9, "line j"+strings.Repeat("x", 9)),
				del(10, "line k"+strings.Repeat("x", 10)), add(10, "changed"),
				ctx(11, 11, "line l"+strings.Repeat("x", 11)), ctx(12, 12, "line m"+strings.Repeat("x", 12)), ctx(13, 13, "line n"+strings.Repeat("x", 13)),
			}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Hunks(tc.old, tc.new, 3)); diff != "" {
				t.Errorf("Hunks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHunksRebuild checks, over many edits, that the hunks are a true
// account: applying them to the old text gives the new one, and every line
// number is where the line is.
func TestHunksRebuild(t *testing.T) {
	olds := []string{"", "a\n", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n", "x\nx\nx\ny\nx\nx\n", "no newline"}
	news := []string{"", "a\n", "a\nB\nc\nd\ne\nf\ng\nH\ni\nj\nk\n", "x\ny\nx\n", "no newline\n", "z\n"}
	for _, o := range olds {
		for _, n := range news {
			checkRebuild(t, o, n)
		}
	}
}

func checkRebuild(t *testing.T, old, new string) {
	t.Helper()
	a, b := lines(old), lines(new)
	var got []string
	next := 0 // the next old line (0-based) not yet copied
	for _, h := range Hunks(old, new, 2) {
		for ; next < h.OldStart-1; next++ {
			got = append(got, a[next])
		}
		for _, l := range h.Lines {
			switch l.Kind {
			case contract.DiffContext, contract.DiffRemoved:
				if text(a[l.OldLine-1]) != l.Text {
					t.Fatalf("%q→%q: old line %d is %q, the hunk says %q", old, new, l.OldLine, a[l.OldLine-1], l.Text)
				}
				if l.Kind == contract.DiffContext {
					got = append(got, a[l.OldLine-1])
				}
				next = l.OldLine
			}
			if l.Kind != contract.DiffRemoved && text(b[l.NewLine-1]) != l.Text {
				t.Fatalf("%q→%q: new line %d is %q, the hunk says %q", old, new, l.NewLine, b[l.NewLine-1], l.Text)
			}
			if l.Kind == contract.DiffAdded {
				got = append(got, b[l.NewLine-1])
			}
		}
	}
	got = append(got, a[next:]...)
	if strings.Join(got, "") != new {
		t.Errorf("%q→%q: applying the hunks gives %q", old, new, strings.Join(got, ""))
	}
}

func FuzzHunks(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, old, new string) {
		if len(old) > 4096 || len(new) > 4096 {
			return
		}
		checkRebuild(t, old, new)
	})
}

// BenchmarkHunks diffs the largest file a diff shows (20,000 lines) with
// an edit every 200 lines, and the same file rewritten whole.
func BenchmarkHunks(b *testing.B) {
	var old, edited, rewritten strings.Builder
	for i := range contract.MaxDiffLines {
		line := "\tfmt.Println(\"line " + strings.Repeat("x", i%40) + "\")\n"
		old.WriteString(line)
		rewritten.WriteString("// " + line)
		if i%200 == 0 {
			line = "\t// changed\n"
		}
		edited.WriteString(line)
	}
	for name, new := range map[string]string{"scattered": edited.String(), "rewritten": rewritten.String()} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				Hunks(old.String(), new, 3)
			}
		})
	}
}
