package build

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tests is the summary of a build's JUnit XML reports.
type Tests struct {
	Files    int // report files read
	Tests    int // test cases
	Failures int // failed assertions
	Errors   int // tests that threw
	Skipped  int
	// Failed are the first MaxFailures failed tests, in report order (files
	// by path).
	Failed []Failure
	// Unreadable are reports that could not be parsed, with why.
	Unreadable []string
}

// Failure is one failed test case.
type Failure struct {
	Class, Name string
	// Error is true for an <error> (the test threw), false for a
	// <failure> (an assertion failed).
	Error   bool
	Type    string // the exception class, when given
	Message string // the message attribute, cut to MaxMessage
	// Detail is the start of the element's text (the stack trace), cut to
	// MaxDetailLines lines.
	Detail string
}

// Limits of report parsing: reports are written by the build, which the
// model controls, so none of them is trusted to be small.
const (
	MaxFailures     = 10
	MaxMessage      = 500
	MaxDetailLines  = 8
	MaxReportBytes  = 16 << 20
	MaxReportFiles  = 2000
	MaxElementDepth = 64
)

// ReportDir is where Gradle writes JUnit XML, below each project.
const ReportDir = "build/test-results"

// ParseJUnit reads one JUnit XML report (a <testsuite> or a <testsuites>
// root; Gradle's, Maven Surefire's and most others) into t.
func (t *Tests) ParseJUnit(r io.Reader) error {
	dec := xml.NewDecoder(io.LimitReader(r, MaxReportBytes+1))
	dec.Strict = true
	// Reports are UTF-8 in practice; other declared charsets are read as is.
	dec.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	var (
		depth   int
		seenTop bool
		inCase  bool
		// A case counts once: its first <failure>, <error> or <skipped>.
		caseDone  bool
		class     string
		name      string
		fail      *Failure // the <failure>/<error> being read
		failDepth int
		detail    strings.Builder
		counted   Tests
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not a JUnit XML report: %w", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			if depth > MaxElementDepth {
				return errors.New("not a JUnit XML report: nested too deep")
			}
			switch local := el.Name.Local; {
			case depth == 1:
				if local != "testsuite" && local != "testsuites" {
					return fmt.Errorf("not a JUnit XML report: the root element is <%s>", local)
				}
				seenTop = true
			case local == "testcase" && !inCase:
				inCase, caseDone = true, false
				class, name = attr(el, "classname"), attr(el, "name")
				counted.Tests++
			case inCase && !caseDone && (local == "failure" || local == "error"):
				caseDone = true
				fail = &Failure{Class: class, Name: name, Error: local == "error", Type: attr(el, "type"), Message: cut(attr(el, "message"), MaxMessage)}
				detail.Reset()
				failDepth = depth
				if fail.Error {
					counted.Errors++
				} else {
					counted.Failures++
				}
			case inCase && !caseDone && local == "skipped":
				caseDone = true
				counted.Skipped++
			}
		case xml.EndElement:
			switch local := el.Name.Local; {
			case fail != nil && depth == failDepth:
				fail.Detail = firstLines(detail.String(), MaxDetailLines)
				counted.Failed = append(counted.Failed, *fail)
				fail = nil
			case inCase && local == "testcase":
				inCase = false
			}
			depth--
		case xml.CharData:
			if fail != nil && detail.Len() < MaxMessage*4 {
				detail.Write(el)
			}
		}
	}
	if !seenTop {
		return errors.New("not a JUnit XML report: it is empty")
	}
	t.Files++
	t.Tests += counted.Tests
	t.Failures += counted.Failures
	t.Errors += counted.Errors
	t.Skipped += counted.Skipped
	for _, f := range counted.Failed {
		if len(t.Failed) < MaxFailures {
			t.Failed = append(t.Failed, f)
		}
	}
	return nil
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// cut shortens s to about n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func firstLines(s string, n int) string {
	s = strings.TrimSpace(s)
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	for i, l := range lines {
		lines[i] = cut(strings.TrimRight(l, "\r \t"), MaxMessage)
	}
	return strings.Join(lines, "\n")
}

// CollectTests reads the JUnit XML reports under build/test-results of the
// workspace's root project and of its subprojects up to two directories
// deep (app/, libs/core/), modified at or after since (a report an earlier
// build left is not this build's). Paths resolve through os.Root: a
// symlink out of the workspace is not followed. Nil when there is none.
func CollectTests(workspace string, since time.Time) (*Tests, error) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, fmt.Errorf("build: the workspace: %w", err)
	}
	defer root.Close()
	fsys := root.FS()
	var files []string
	walkReports := func(dir string) {
		fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || len(files) >= MaxReportFiles {
				return fs.SkipDir
			}
			if d.Type().IsRegular() && strings.HasSuffix(p, ".xml") {
				if fi, err := d.Info(); err == nil && !fi.ModTime().Before(since) {
					files = append(files, p)
				}
			}
			return nil
		})
	}
	for _, project := range projectDirs(fsys) {
		walkReports(path.Join(project, ReportDir))
	}
	if len(files) == 0 {
		return nil, nil
	}
	slices.Sort(files)
	t := &Tests{}
	for _, p := range files {
		f, err := root.Open(p)
		if err != nil {
			t.Unreadable = append(t.Unreadable, p+": "+err.Error())
			continue
		}
		err = t.ParseJUnit(f)
		f.Close()
		if err != nil {
			t.Unreadable = append(t.Unreadable, p+": "+err.Error())
		}
	}
	return t, nil
}

// projectDirs returns "." and the directories up to two deep that may be
// Gradle projects: not hidden, not build outputs or sources.
func projectDirs(fsys fs.FS) []string {
	dirs := []string{"."}
	skip := func(name string) bool {
		return strings.HasPrefix(name, ".") || name == "build" || name == "src" || name == "node_modules" || name == "gradle"
	}
	children := func(dir string) []string {
		ents, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return nil
		}
		var out []string
		for _, e := range ents {
			if e.IsDir() && !skip(e.Name()) {
				out = append(out, path.Join(dir, e.Name()))
			}
		}
		return out
	}
	for _, c := range children(".") {
		dirs = append(dirs, c)
		dirs = append(dirs, children(c)...)
		if len(dirs) > 4096 {
			break
		}
	}
	return dirs
}

// Summary is t in a few lines for the model: the counts, then the first
// failures with their messages.
func (t *Tests) Summary() string {
	if t == nil {
		return "Tests: no JUnit XML reports under " + ReportDir + "/."
	}
	var b strings.Builder
	passed := t.Tests - t.Failures - t.Errors - t.Skipped
	fmt.Fprintf(&b, "Tests: %d run, %d passed, %d failed, %d errors, %d skipped (%s)", t.Tests, max(passed, 0), t.Failures, t.Errors, t.Skipped, pluralFiles(t.Files))
	if n := t.Failures + t.Errors; n > 0 {
		fmt.Fprintf(&b, "\nFirst failures:")
		for _, f := range t.Failed {
			kind := "failed"
			if f.Error {
				kind = "error"
			}
			fmt.Fprintf(&b, "\n- %s > %s (%s)", f.Class, f.Name, kind)
			msg := f.Message
			if msg == "" && f.Detail != "" {
				msg, _, _ = strings.Cut(f.Detail, "\n")
			}
			if f.Type != "" && !strings.HasPrefix(msg, f.Type) {
				msg = strings.TrimSpace(f.Type + ": " + msg)
			}
			if msg != "" {
				fmt.Fprintf(&b, ": %s", strings.ReplaceAll(msg, "\n", " "))
			}
		}
		if n > len(t.Failed) {
			fmt.Fprintf(&b, "\n… and %d more", n-len(t.Failed))
		}
	}
	for i, u := range t.Unreadable {
		if i == 3 {
			fmt.Fprintf(&b, "\n… and %d more unreadable reports", len(t.Unreadable)-i)
			break
		}
		fmt.Fprintf(&b, "\nUnreadable report %s", u)
	}
	return b.String()
}

func pluralFiles(n int) string {
	if n == 1 {
		return "1 report file"
	}
	return strconv.Itoa(n) + " report files"
}
