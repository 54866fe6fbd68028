package tools

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExpandBraces(t *testing.T) {
	tests := map[string][]string{
		"*.go":             {"*.go"},
		"*.{ts,tsx}":       {"*.ts", "*.tsx"},
		"a{b,c{d,e}}f":     {"abf", "acdf", "acef"},
		"{a,b}/{c,d}":      {"a/c", "a/d", "b/c", "b/d"},
		"{single}":         {"{single}"},
		"unclosed{a,b":     {"unclosed{a,b"},
		`esc\{a,b}`:        {`esc\{a,b}`},
		"[{]x":             {"[{]x"},
		"{,x}y":            {"y", "xy"},
		"{a}{b,c}":         {"{a}b", "{a}c"},
		"src/**/*.{js,ts}": {"src/**/*.js", "src/**/*.ts"},
	}
	for in, want := range tests {
		got, err := expandBraces(in)
		if err != nil {
			t.Errorf("expandBraces(%q): %v", in, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("expandBraces(%q) (-want +got):\n%s", in, diff)
		}
	}
	if _, err := expandBraces("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"); err == nil {
		t.Error("no error for 2048 alternatives")
	}
}

// globCase is a pattern, a path, and whether the predicate under test holds
// for the two.
type globCase struct {
	pattern, path string
	want          bool
}

// checkGlob compiles each case's pattern and checks pred (what it says)
// on the case's path.
func checkGlob(t *testing.T, pred func(*globPattern, string) bool, says string, tests []globCase) {
	t.Helper()
	for _, tt := range tests {
		g, err := compileGlob(tt.pattern)
		if err != nil {
			t.Errorf("compileGlob(%q): %v", tt.pattern, err)
			continue
		}
		if got := pred(g, tt.path); got != tt.want {
			t.Errorf("%q %s %q = %v, want %v", tt.pattern, says, tt.path, got, tt.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	checkGlob(t, (*globPattern).match, "matches", []globCase{
		{"*.go", "main.go", true},
		{"*.go", "cmd/main.go", false},
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/c/main.go", true},
		{"**/*.go", "a/b/c/main.ts", false},
		{"src/**", "src/a/b", true},
		{"src/**/x", "src/x", true},
		{"src/**/x", "src/a/b/x", true},
		{"src/**/x", "lib/x", false},
		{"**/*.{ts,tsx}", "web/app.tsx", true},
		{"**/*.{ts,tsx}", "web/app.ts", true},
		{"**/*.{ts,tsx}", "web/app.js", false},
		{"?.txt", "a.txt", true},
		{"?.txt", "ab.txt", false},
		{"[ab].txt", "b.txt", true},
		{"[!ab].txt", "b.txt", false},
		{"[!ab].txt", "c.txt", true},
		{"a**b", "axxb", true},
		{"a**b", "ax/xb", false},
		{"cmd/*/main.go", "cmd/talkide/main.go", true},
		{"**/**/*.md", "a.md", true},
		{"./x/*.go", "x/y.go", true},
		{`\*.go`, "*.go", true},
		{`\*.go`, "a.go", false},
	})
	for _, bad := range []string{"", "[", "a/[b"} {
		if _, err := compileGlob(bad); err == nil {
			t.Errorf("compileGlob(%q): no error", bad)
		}
	}
}

func TestMayMatchUnder(t *testing.T) {
	checkGlob(t, (*globPattern).mayMatchUnder, "may match under", []globCase{
		{"*.go", "cmd", false},
		{"cmd/*.go", "cmd", true},
		{"cmd/*.go", "internal", false},
		{"cmd/*.go", "cmd/x", false},
		{"**/*.go", "a/b/c", true},
		{"src/**/*.go", "src/a", true},
		{"src/**/*.go", "lib", false},
		{"{a,b}/*.go", "b", true},
	})
}

func TestIgnoreRules(t *testing.T) {
	ig := parseIgnore([]byte(`
# comment
build/
/dist
*.log
docs/gen
!keep.log
tmp   
`))
	tests := []struct {
		path  string
		isDir bool
		want  bool
	}{
		{"build", true, true},
		{"a/build", true, true},
		{"build", false, false}, // dir-only rule
		{"dist", true, true},
		{"a/dist", true, false}, // anchored
		{"x.log", false, true},
		{"a/b/x.log", false, true},
		{"keep.log", false, true}, // negation unsupported
		{"docs/gen", true, true},
		{"a/docs/gen", true, false},
		{"tmp", true, true},
		{"tmp", false, true},
		{".git", true, true},
		{"a/node_modules", true, true},
		{"node_modules", false, false},
		{"src", true, false},
	}
	for _, tt := range tests {
		if got := ig.ignored(tt.path, tt.isDir); got != tt.want {
			t.Errorf("ignored(%q, dir=%v) = %v, want %v", tt.path, tt.isDir, got, tt.want)
		}
	}
}
