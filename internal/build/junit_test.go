package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseJUnitGradleReport(t *testing.T) {
	f, err := os.Open("testdata/TEST-com.acme.CalcTest.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got Tests
	if err := got.ParseJUnit(f); err != nil {
		t.Fatal(err)
	}
	want := Tests{Files: 1, Tests: 4, Failures: 1, Errors: 1, Skipped: 1, Failed: []Failure{
		{Class: "com.acme.CalcTest", Name: "divides()", Type: "org.opentest4j.AssertionFailedError",
			Message: "org.opentest4j.AssertionFailedError: expected: <2> but was: <3>",
			Detail:  "org.opentest4j.AssertionFailedError: expected: <2> but was: <3>\n\tat app//org.junit.jupiter.api.AssertionUtils.fail(AssertionUtils.java:151)\n\tat app//com.acme.CalcTest.divides(CalcTest.java:12)"},
		{Class: "com.acme.CalcTest", Name: "overflows()", Error: true, Type: "java.lang.IllegalStateException", Message: "boom",
			Detail: "java.lang.IllegalStateException: boom\n\tat com.acme.Calc.overflow(Calc.java:3)"},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseJUnit (-want +got):\n%s", d)
	}
	sum := got.Summary()
	for _, s := range []string{
		"Tests: 4 run, 1 passed, 1 failed, 1 errors, 1 skipped (1 report file)",
		"- com.acme.CalcTest > divides() (failed): org.opentest4j.AssertionFailedError: expected: <2> but was: <3>",
		"- com.acme.CalcTest > overflows() (error): java.lang.IllegalStateException: boom",
	} {
		if !strings.Contains(sum, s) {
			t.Errorf("summary lacks %q:\n%s", s, sum)
		}
	}
}

func TestParseJUnitRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":      "",
		"not xml":    "BUILD SUCCESSFUL",
		"other root": "<html><body/></html>",
		"truncated":  `<testsuite><testcase name="a">`,
		"deep":       "<testsuite>" + strings.Repeat("<a>", MaxElementDepth+1) + strings.Repeat("</a>", MaxElementDepth+1) + "</testsuite>",
	} {
		t.Run(name, func(t *testing.T) {
			var got Tests
			if err := got.ParseJUnit(strings.NewReader(in)); err == nil {
				t.Fatalf("ParseJUnit(%q) accepted it: %+v", in, got)
			}
			if got.Files != 0 || got.Tests != 0 {
				t.Errorf("a rejected report counted: %+v", got)
			}
		})
	}
}

func TestParseJUnitBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("<testsuites><testsuite>")
	for range MaxFailures + 5 {
		b.WriteString(`<testcase classname="C" name="n"><failure message="` + strings.Repeat("m", MaxMessage*3) + `">` + strings.Repeat("line\n", 100) + `</failure></testcase>`)
	}
	b.WriteString("</testsuite></testsuites>")
	var got Tests
	if err := got.ParseJUnit(strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
	if got.Failures != MaxFailures+5 || len(got.Failed) != MaxFailures {
		t.Errorf("failures %d, kept %d; want %d, %d", got.Failures, len(got.Failed), MaxFailures+5, MaxFailures)
	}
	f := got.Failed[0]
	if len(f.Message) > MaxMessage+len("…") || strings.Count(f.Detail, "\n") > MaxDetailLines {
		t.Errorf("a failure was not cut: message %d bytes, detail %d lines", len(f.Message), strings.Count(f.Detail, "\n"))
	}
	if !strings.Contains(got.Summary(), "… and 5 more") {
		t.Errorf("summary does not count the rest:\n%s", got.Summary())
	}
	// A report larger than MaxReportBytes is cut, hence not well-formed.
	huge := "<testsuite>" + strings.Repeat("<testcase name='x'/>", MaxReportBytes/20+1) + "</testsuite>"
	var h Tests
	if err := h.ParseJUnit(strings.NewReader(huge)); err == nil {
		t.Errorf("a report over %d bytes was accepted", MaxReportBytes)
	}
}

func TestCollectTests(t *testing.T) {
	ws := t.TempDir()
	report, err := os.ReadFile("testdata/TEST-com.acme.CalcTest.xml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel, content string, mtime time.Time) {
		t.Helper()
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now().Add(-time.Minute)
	now := time.Now()
	write("build/test-results/test/TEST-a.xml", string(report), now)
	write("app/build/test-results/test/TEST-b.xml", `<testsuite><testcase classname="B" name="ok"/></testsuite>`, now)
	write("libs/core/build/test-results/test/TEST-c.xml", `<testsuite><testcase classname="C" name="ok"/></testsuite>`, now)
	write("libs/core/build/test-results/test/broken.xml", `<testsuite>`, now)
	write("build/test-results/test/TEST-old.xml", `<testsuite><testcase classname="Old" name="ok"/></testsuite>`, start.Add(-time.Hour))
	write("build/test-results/test/notes.txt", "not a report", now)
	write(".hidden/build/test-results/test/TEST-h.xml", `<testsuite><testcase classname="H" name="ok"/></testsuite>`, now)
	// A symlink out of the workspace is not followed.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "TEST-x.xml"), []byte(`<testsuite><testcase classname="X" name="x"/></testsuite>`), 0o644)
	os.MkdirAll(filepath.Join(ws, "evil/build"), 0o755)
	if err := os.Symlink(outside, filepath.Join(ws, "evil/build/test-results")); err != nil {
		t.Fatal(err)
	}

	got, err := CollectTests(ws, start)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Files != 3 || got.Tests != 6 || got.Failures != 1 || got.Errors != 1 {
		t.Fatalf("CollectTests = %+v; want 3 files, 6 tests, 1 failure, 1 error", got)
	}
	if len(got.Unreadable) != 1 || !strings.HasPrefix(got.Unreadable[0], "libs/core/build/test-results/test/broken.xml: ") {
		t.Errorf("unreadable = %q", got.Unreadable)
	}

	none, err := CollectTests(t.TempDir(), start)
	if err != nil || none != nil {
		t.Errorf("CollectTests of a workspace without reports = %+v, %v; want nil, nil", none, err)
	}
	if !strings.Contains(none.Summary(), "no JUnit XML reports") {
		t.Errorf("nil summary = %q", none.Summary())
	}
}

func FuzzParseJUnit(f *testing.F) {
	if b, err := os.ReadFile("testdata/TEST-com.acme.CalcTest.xml"); err == nil {
		f.Add(string(b))
	}
	f.Add(`<testsuites><testsuite><testcase classname="a" name="b"><failure message="x">y</failure></testcase></testsuite></testsuites>`)
	f.Add(`<testsuite><testcase><error/><failure/><skipped/></testcase></testsuite>`)
	f.Add(`<?xml version="1.0" encoding="ISO-8859-1"?><testsuite/>`)
	f.Fuzz(func(t *testing.T, in string) {
		var got Tests
		err := got.ParseJUnit(strings.NewReader(in))
		if err != nil {
			if got.Files != 0 || got.Tests != 0 {
				t.Fatalf("a rejected report counted: %+v", got)
			}
			return
		}
		if got.Files != 1 || got.Failures+got.Errors+got.Skipped > got.Tests || len(got.Failed) > MaxFailures {
			t.Fatalf("inconsistent counts: %+v", got)
		}
		if got.Failures+got.Errors > got.Tests {
			t.Fatalf("more failures than tests: %+v", got)
		}
		for _, f := range got.Failed {
			if len(f.Message) > MaxMessage+len("…") {
				t.Fatalf("message not cut: %d bytes", len(f.Message))
			}
		}
		_ = got.Summary()
	})
}
