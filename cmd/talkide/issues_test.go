package main

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
)

// toolResults returns the tool.finished events of one turn by tool name.
func toolResults(got []streamed, turnID string) map[string][]*contract.ToolEvent {
	out := map[string][]*contract.ToolEvent{}
	for _, s := range got {
		if s.ev.Kind == contract.KindToolFinished && s.ev.TurnID == turnID {
			out[s.ev.Tool.Name] = append(out[s.ev.Tool.Name], s.ev.Tool)
		}
	}
	return out
}

// turnFinished fails t unless the turn's last event is turn.finished.
func turnFinished(t *testing.T, got []streamed) {
	t.Helper()
	if last := got[len(got)-1].ev; last.Kind != contract.KindTurnFinished {
		t.Fatalf("turn ended with %s: %+v", last.Kind, last.Failure)
	}
}

// TestEndToEndIssueTracking: the agent files an issue through the
// talkide-issue-tracking MCP server, comments on it and lists it in the next
// turn; the control-plane stores it and the browser API lists it with the
// comment.
func TestEndToEndIssueTracking(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)

	const (
		report  = "mcp__talkide-issue-tracking__report_issue"
		comment = "mcp__talkide-issue-tracking__comment_issue"
		list    = "mcp__talkide-issue-tracking__list_issues"
	)
	r1 := send(t, base, c.ID, `The test is flaky; file it. [[tool:`+report+` {"title":"Flaky test","body":"TestFoo fails one run in ten on CI.","severity":"high","labels":["ci"]}]]`)
	first := readStream(t, base, c.ID, 0, turnEnded(r1.TurnID))
	turnFinished(t, first)
	filed := toolResults(first, r1.TurnID)[report]
	if len(filed) != 1 || filed[0].IsError || !strings.Contains(filed[0].Output, "Filed issue iss_") {
		t.Fatalf("%s results: %+v", report, filed)
	}
	issueID := regexp.MustCompile(`iss_[0-9a-z]+`).FindString(filed[0].Output)

	r2 := send(t, base, c.ID, `Note it and show the list. [[tool:`+comment+` {"issue_id":"`+issueID+`","body":"Seen again on main after the retry change."}]] [[tool:`+list+` {"status":"all"}]]`)
	second := readStream(t, base, c.ID, first[len(first)-1].ev.Seq, turnEnded(r2.TurnID))
	turnFinished(t, second)
	results := toolResults(second, r2.TurnID)
	if cs := results[comment]; len(cs) != 1 || cs[0].IsError || !strings.Contains(cs[0].Output, "Commented on issue "+issueID) {
		t.Errorf("%s results: %+v", comment, cs)
	}
	ls := results[list]
	if len(ls) != 1 || ls[0].IsError {
		t.Fatalf("%s results: %+v", list, ls)
	}
	for _, want := range []string{"1 issue in this conversation", issueID + ": Flaky test", "severity: high", "labels: ci", "Seen again on main after the retry change."} {
		if !strings.Contains(ls[0].Output, want) {
			t.Errorf("%s output lacks %q:\n%s", list, want, ls[0].Output)
		}
	}

	// The browser lists the issue with its comment.
	var got contract.IssueList
	if status := api(t, http.MethodGet, base+"/api/conversations/"+c.ID+"/issues", nil, &got); status != http.StatusOK {
		t.Fatalf("GET issues: status %d", status)
	}
	if len(got.Issues) != 1 {
		t.Fatalf("browser issues: %+v", got.Issues)
	}
	i := got.Issues[0]
	if i.ID != issueID || i.Title != "Flaky test" || i.Body != "TestFoo fails one run in ten on CI." || i.Severity != "high" ||
		!slices.Equal(i.Labels, []string{"ci"}) || i.Status != contract.IssueOpen || i.TurnID != r1.TurnID || i.ConversationID != c.ID {
		t.Errorf("browser issue %+v", i)
	}
	if len(i.Comments) != 1 || i.Comments[0].Body != "Seen again on main after the retry change." || i.Comments[0].TurnID != r2.TurnID {
		t.Errorf("browser comments %+v", i.Comments)
	}

	// Stored under the dev tenant-env and the conversation's user.
	stored, err := st.ControlPlane.Store.GetIssue(context.Background(), issueID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Tenant != roles.DevTenant || stored.Env != roles.DevEnv || stored.UserID != roles.DevUser {
		t.Errorf("stored issue under %s/%s for %s", stored.Tenant, stored.Env, stored.UserID)
	}

	// Another conversation's agent sees none of it.
	c2 := createConversation(t, base)
	r3 := send(t, base, c2.ID, `[[tool:`+list+` {"status":"all"}]] [[tool:`+comment+` {"issue_id":"`+issueID+`","body":"not mine"}]]`)
	third := readStream(t, base, c2.ID, 0, turnEnded(r3.TurnID))
	turnFinished(t, third)
	other := toolResults(third, r3.TurnID)
	if ls := other[list]; len(ls) != 1 || !strings.Contains(ls[0].Output, "no issues") {
		t.Errorf("list in another conversation: %+v", ls)
	}
	if cs := other[comment]; len(cs) != 1 || !cs[0].IsError || !strings.Contains(cs[0].Output, "no issue "+issueID) {
		t.Errorf("comment from another conversation: %+v", cs)
	}
}
