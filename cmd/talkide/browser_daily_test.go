package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/roles"
)

// The browser tests of what a day of use turned up (web/test/daily.mjs):
// each scenario runs at a laptop's and a phone's size where layout matters.

// TestBrowserDailyFollow: ten turns with long tool outputs, an interrupted
// turn and one a budget stopped, each turn's end in view, with scroll
// events fired while content grows; scrolling up lets go, one's own
// message comes back, "Jump to latest" clear of the last line.
func TestBrowserDailyFollow(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "follow", func(step string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var max int64
		switch step {
		case "exhaust-budget":
			// Less than any turn costs, and already spent.
			max = 1
		case "restore-budget":
			max = int64(1000 * budget.Dollar)
		default:
			t.Errorf("unexpected step %q", step)
			return
		}
		if err := st.ControlPlane.Budget.SetLimit(ctx, budget.Limit{Subject: budget.User(roles.DevUser), Kind: budget.SpendPerDay, Max: max}); err != nil {
			t.Errorf("set limit: %v", err)
		}
	})
}

// TestBrowserDailyPhone: 390×844 without horizontal overflow (the budget
// in the header wraps), Send and Stop on screen, the menu's drawer with
// the conversations, a new one, Changes and Issues; the panel behind the
// menu at 900 px; all in view without it at 1280.
func TestBrowserDailyPhone(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	for _, k := range []budget.Kind{budget.SpendPerDay, budget.SpendPerMonth} {
		if err := st.ControlPlane.Budget.SetLimit(t.Context(), budget.Limit{Subject: budget.User(roles.DevUser), Kind: k, Max: int64(50 * budget.Dollar)}); err != nil {
			t.Fatal(err)
		}
	}
	runScenario(t, st, "phone", noSteps(t))
}

// TestBrowserDailyScenarios runs the scenarios that need nothing of the
// Go side: the tab's title follows the open conversation ("title"); Copy
// on code and messages, Retry after an overloaded turn, edit-and-resend of
// the last message ("copyretryedit"); Esc closes Ctrl+K's dialog, not the
// turn ("dialog"); a fresh install opens ready to start ("fresh"); tool
// cards open after a reload, the running timer, names in words, Markdown
// in user messages, tables and quotes, the contrast of highlighted code
// ("details").
func TestBrowserDailyScenarios(t *testing.T) {
	browserParallel(t)
	for _, name := range []string{"title", "copyretryedit", "dialog", "fresh", "details"} {
		t.Run(name, func(t *testing.T) {
			st, _ := startTestStack(t)
			runScenario(t, st, name, noSteps(t))
		})
	}
}

// TestBrowserDailyWorkspace: a turn that makes, edits and writes files and
// runs a command with a long output; the Files tab's tree, a file in the
// viewer with line numbers, highlighted, downloaded as an attachment; a
// change's diff with context and line numbers; the tool card opening the
// output kept whole; at a laptop's size and a phone's.
func TestBrowserDailyWorkspace(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "workspace", noSteps(t))
}

// TestBrowserDailyNoticeOnce: a worker restart writes the simulator's
// notice to the log again; the page shows it once.
func TestBrowserDailyNoticeOnce(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "notice", restartStep(t, "restart-worker", st.RestartWorker))
}

// TestBrowserDailyBusy: a worker that runs one turn at a time
// (--max-running-turns 1) refuses the page's message while another
// conversation's turn runs; the page says why, and once that turn is
// stopped sends the message again by itself, and it runs once.
func TestBrowserDailyBusy(t *testing.T) {
	browserParallel(t)
	st := startDevT(t, roles.DevConfig{Agent: roles.AgentConfig{MaxRunningTurns: 1}})
	base := st.Info.ControlPlane
	other := createConversation(t, base)
	send(t, base, other.ID, `[[tool:Bash {"command":"sleep 120"}]]`)
	res := runScenario(t, st, "busy", func(step string) {
		if step != "free" {
			t.Errorf("unexpected step %q", step)
			return
		}
		if st := api(t, http.MethodPost, base+"/api/conversations/"+other.ID+"/interrupt", nil, nil); st != http.StatusOK {
			t.Errorf("interrupt the other turn: status %d", st)
		}
	})
	if said, _ := res["said"].(string); !strings.Contains(said, "send it again") {
		t.Errorf("the page showed %q", said)
	}
}
