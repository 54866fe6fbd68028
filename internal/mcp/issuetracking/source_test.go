package issuetracking_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/harness/native"
	"github.com/talkide/platform/internal/mcp/issuetracking"
	"github.com/talkide/platform/internal/tools"
)

var _ native.ToolSource = (*issuetracking.Source)(nil)

func turn(conv, id string) *harness.Turn {
	return &harness.Turn{ConversationID: conv, TurnID: id}
}

func find(t *testing.T, ts []tools.Tool, name string) tools.Tool {
	t.Helper()
	tool := tools.Find(ts, name)
	if tool == nil {
		t.Fatalf("no tool %s", name)
	}
	return tool
}

func TestSource(t *testing.T) {
	f := startFakeCP(t)
	src := issuetracking.NewSource(f.client(nil), nil)
	defer src.Close()

	ts, err := src.Tools(t.Context(), turn("conv1", "t_1"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range ts {
		names = append(names, tool.Name())
		if tool.Description() == "" {
			t.Errorf("%s has no description", tool.Name())
		}
	}
	want := "mcp__talkide-issue-tracking__comment_issue mcp__talkide-issue-tracking__list_issues mcp__talkide-issue-tracking__report_issue"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tools %s, want %s", got, want)
	}

	report := find(t, ts, issuetracking.ToolPrefix+"report_issue")
	schema := report.InputSchema()
	if schema["type"] != "object" || schema["properties"].(map[string]any)["severity"] == nil {
		t.Errorf("report_issue schema %v", schema)
	}
	delete(schema, "properties")
	if report.InputSchema()["properties"] == nil {
		t.Error("InputSchema returned a map shared between calls")
	}

	res, err := report.Run(t.Context(), tools.Call{ID: "toolu_1", Input: []byte(`{"title":"Flaky test","body":"fails","severity":"high","labels":["ci"]}`)})
	if err != nil || res.IsError || !strings.Contains(res.Output, "Filed issue iss_1.") {
		t.Fatalf("report_issue: %+v, %v", res, err)
	}
	if c := f.Creates(); len(c) != 1 || c[0].IdempotencyKey != "conv1/issue-toolu_1" || c[0].ConversationID != "conv1" || c[0].TurnID != "t_1" {
		t.Errorf("create requests %+v", c)
	}

	// A refusal is a result the model sees, not a Go error.
	res, err = find(t, ts, issuetracking.ToolPrefix+"comment_issue").Run(t.Context(), tools.Call{ID: "toolu_2", Input: []byte(`{"issue_id":"iss_404","body":"x"}`)})
	if err != nil || !res.IsError || !strings.Contains(res.Output, "no issue iss_404") {
		t.Errorf("comment on a missing issue: %+v, %v", res, err)
	}
	res, err = report.Run(t.Context(), tools.Call{ID: "toolu_3", Input: []byte(`not json`)})
	if err != nil || !res.IsError {
		t.Errorf("invalid input: %+v, %v", res, err)
	}

	// The next turn of another conversation gets tools scoped to it.
	ts2, err := src.Tools(t.Context(), turn("conv2", "t_7"))
	if err != nil {
		t.Fatal(err)
	}
	res, err = find(t, ts2, issuetracking.ToolPrefix+"list_issues").Run(t.Context(), tools.Call{ID: "toolu_4", Input: []byte(`{"status":"all"}`)})
	if err != nil || res.IsError || !strings.Contains(res.Output, "no issues") {
		t.Errorf("list_issues in conv2: %+v, %v", res, err)
	}
}

// TestSourceConcurrentConversations runs many conversations' calls at once
// over the one session: each files its issue under its own conversation.
func TestSourceConcurrentConversations(t *testing.T) {
	f := startFakeCP(t)
	src := issuetracking.NewSource(f.client(nil), nil)
	defer src.Close()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conv := fmt.Sprintf("conv%02d", i)
			ts, err := src.Tools(t.Context(), turn(conv, "t_1"))
			if err != nil {
				t.Error(err)
				return
			}
			res, err := tools.Find(ts, issuetracking.ToolPrefix+"report_issue").Run(t.Context(), tools.Call{
				ID: "toolu_1", Input: []byte(`{"title":"from ` + conv + `","body":"b"}`),
			})
			if err != nil || res.IsError {
				t.Errorf("%s: %+v, %v", conv, res, err)
			}
		})
	}
	wg.Wait()
	issues := f.Issues()
	if len(issues) != n {
		t.Fatalf("%d issues, want %d", len(issues), n)
	}
	for _, i := range issues {
		if i.Title != "from "+i.ConversationID {
			t.Errorf("issue %q filed under %s", i.Title, i.ConversationID)
		}
	}
}

// TestSourceInterrupt: cancelling a call's ctx (an interrupted turn) ends
// it promptly with ctx's error, and the session serves the next call.
func TestSourceInterrupt(t *testing.T) {
	f := startFakeCP(t)
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	f.setFail(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.RawQuery, "blocked") {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return true
		}
		return false
	})
	defer close(release)
	src := issuetracking.NewSource(f.client(nil), nil)
	defer src.Close()
	ts, err := src.Tools(t.Context(), turn("blocked", "t_1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := find(t, ts, issuetracking.ToolPrefix+"list_issues").Run(ctx, tools.Call{ID: "toolu_1", Input: []byte(`{}`)})
		done <- err
	}()
	<-arrived
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("interrupted call: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the interrupted call did not end")
	}
	ts, err = src.Tools(t.Context(), turn("conv1", "t_2"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := find(t, ts, issuetracking.ToolPrefix+"list_issues").Run(t.Context(), tools.Call{ID: "toolu_2", Input: []byte(`{}`)}); err != nil || res.IsError {
		t.Errorf("call after an interrupt: %+v, %v", res, err)
	}
}

// TestSourceCloseLeavesNoGoroutines starts the session, uses it and
// closes it: every goroutine it started ends, and Tools then fails.
func TestSourceCloseLeavesNoGoroutines(t *testing.T) {
	f := startFakeCP(t)
	// No keep-alive connections, whose goroutines would outlive the test's
	// count.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	before := runtime.NumGoroutine()

	src := issuetracking.NewSource(f.client(hc), nil)
	for i := range 3 {
		ts, err := src.Tools(t.Context(), turn("conv1", fmt.Sprint("t_", i)))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := find(t, ts, issuetracking.ToolPrefix+"report_issue").Run(t.Context(), tools.Call{
			ID: fmt.Sprint("toolu_", i), Input: []byte(`{"title":"t","body":"b"}`),
		}); err != nil || res.IsError {
			t.Fatalf("report_issue: %+v, %v", res, err)
		}
	}
	if runtime.NumGoroutine() <= before {
		t.Fatal("the session started no goroutines; the check below would prove nothing")
	}
	if err := src.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := src.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	if _, err := src.Tools(t.Context(), turn("conv1", "t_9")); !errors.Is(err, issuetracking.ErrClosed) {
		t.Errorf("Tools after Close: %v, want ErrClosed", err)
	}
}

// A source that is never used starts nothing and closes cleanly.
func TestSourceCloseUnused(t *testing.T) {
	f := startFakeCP(t)
	if err := issuetracking.NewSource(f.client(nil), nil).Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
