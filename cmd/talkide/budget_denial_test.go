package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/syncbuf"
)

// spendThenLimit runs one turn of conv, waits until the budget has charged
// it, and sets the dev user's daily limit to one and a half times what
// that turn cost: spent, for another turn like it. It returns what was
// used and the limit.
func spendThenLimit(t *testing.T, st *roles.Dev, conv string) (used, limit budget.Money) {
	t.Helper()
	base := st.Info.ControlPlane
	r := send(t, base, conv, "hello before the limit")
	got := readStream(t, base, conv, 0, turnEnded(r.TurnID))
	if last := got[len(got)-1].ev; last.Kind != contract.KindTurnFinished {
		t.Fatalf("the first turn ended with %s %+v", last.Kind, last.Failure)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.ControlPlane.Budget.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	setDailyLimit(t, st, budget.Dollar)
	ls, err := st.ControlPlane.Budget.Status(t.Context(), budget.User(roles.DevUser))
	if err != nil || len(ls) != 1 || ls[0].Used <= 0 {
		t.Fatalf("budget status: %+v, %v; want what the first turn cost", ls, err)
	}
	used = budget.Money(ls[0].Used)
	limit = used * 3 / 2
	setDailyLimit(t, st, limit)
	return used, limit
}

func setDailyLimit(t *testing.T, st *roles.Dev, max budget.Money) {
	t.Helper()
	if err := st.ControlPlane.Budget.SetLimit(t.Context(), budget.Limit{Subject: budget.User(roles.DevUser), Kind: budget.SpendPerDay, Max: int64(max)}); err != nil {
		t.Fatal(err)
	}
}

// deniedTurn sends text and returns the turn's events, checking that it
// failed with budget_exhausted within within, and that it says what the
// limit is, what was used and when the limit resets; details: in fields
// too (failure.budget).
func deniedTurn(t *testing.T, st *roles.Dev, conv, text string, after int64, used, limit budget.Money, within time.Duration, details bool) []streamed {
	t.Helper()
	base := st.Info.ControlPlane
	start := time.Now()
	r := send(t, base, conv, text)
	got := readStream(t, base, conv, after, turnEnded(r.TurnID))
	wall := time.Since(start)
	var started, failed contract.Event
	for _, s := range got {
		switch {
		case s.ev.TurnID != r.TurnID:
		case s.ev.Kind == contract.KindTurnStarted:
			started = s.ev
		case s.ev.Kind == contract.KindTurnFailed:
			failed = s.ev
		}
	}
	if failed.Failure == nil {
		t.Fatalf("the turn did not fail: %v", kinds(got))
	}
	// What the worker measured: from turn.started to turn.failed.
	d := failed.Time.Sub(started.Time)
	t.Logf("the denied turn took %v (%v as the client saw it)", d, wall)
	if d > within || wall > within+5*time.Second {
		t.Errorf("the denied turn took %v (%v as the client saw it), want under %v", d, wall, within)
	}
	resets := time.Date(failed.Time.UTC().Year(), failed.Time.UTC().Month(), failed.Time.UTC().Day()+1, 0, 0, 0, 0, time.UTC)
	f := failed.Failure
	want := &contract.TurnFailure{Code: contract.FailBudgetExhausted, HTTPStatus: 429, Message: f.Message}
	if details {
		if f.Budget == nil || f.Budget.RetryAfterSeconds <= 0 || f.Budget.NeedUSD == "" {
			t.Fatalf("failure %+v, want its budget details", f)
		}
		f.Budget.NeedUSD, f.Budget.RetryAfterSeconds = "", 0 // an estimate; the clock's
		want.Budget = &contract.BudgetDenial{Scope: "user", Subject: roles.DevUser, Kind: "spend_per_day",
			MaxUSD: strings.TrimPrefix(limit.String(), "$"), UsedUSD: strings.TrimPrefix(used.String(), "$"), HeldUSD: "0.00", ResetsAt: &resets}
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("turn.failed (-want +got):\n%s", diff)
	}
	// The message's amounts are rounded as talkide admin budget status
	// shows them; failure.budget has them exact.
	for _, part := range []string{"the budget is exhausted: ", "spending limit per day", used.Display() + " used", "the limit is " + limit.Display(), "room frees up at " + resets.Format(time.RFC3339)} {
		if !strings.Contains(f.Message, part) {
			t.Errorf("message %q does not say %q", f.Message, part)
		}
	}
	return got
}

// The problem a new user met: with the daily limit spent, a turn hung for
// the hours until the limit reset (the SDK slept through the gateway's
// Retry-After), raising the limit did not release it, and every later
// message queued behind it. Now the turn ends at once with
// budget_exhausted, the chat client shows why, and once the limit is
// raised the next turn runs.
func TestBudgetDeniedTurnEndsAtOnce(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	used, limit := spendThenLimit(t, st, c.ID)

	got := deniedTurn(t, st, c.ID, "are you there?", 0, used, limit, time.Second, true)
	last := got[len(got)-1].ev.Seq

	// The chat client renders the failure with its message, once: the
	// command exits 1 without repeating it as its error.
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	code := chatExit(ctx, []string{"--addr", base, "--conversation", c.ID, "-m", "still there?"}, strings.NewReader(""), &out, &errOut)
	if code != exitError {
		t.Errorf("chat -m for a denied turn exited %d, want %d", code, exitError)
	}
	all := out.String() + errOut.String()
	for _, part := range []string{"turn failed (budget_exhausted)", "the limit is " + limit.Display(), "room frees up at"} {
		if n := strings.Count(all, part); n != 1 {
			t.Errorf("chat printed %q %d times, want once; stdout:\n%s\nstderr:\n%s", part, n, out.String(), errOut.String())
		}
	}

	// Raised, the limit lets the next turn through at once.
	setDailyLimit(t, st, 100*budget.Dollar)
	r := send(t, base, c.ID, "and now?")
	got = readStream(t, base, c.ID, last, turnEnded(r.TurnID))
	if end := got[len(got)-1].ev; end.Kind != contract.KindTurnFinished {
		t.Fatalf("after raising the limit the turn ended with %s %+v", end.Kind, end.Failure)
	}
}

// The same with the Claude Code CLI: the gateway's x-should-retry: false
// keeps it from retrying, and its result line maps onto budget_exhausted.
func TestClaudeCodeBudgetDenied(t *testing.T) {
	logs := &syncbuf.Buffer{}
	st := startClaudeCodeStack(t, slog.New(slog.NewJSONHandler(logs, nil)))
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	used, limit := spendThenLimit(t, st, c.ID)

	// The CLI shows only the gateway's message, so there are no details in
	// fields.
	got := deniedTurn(t, st, c.ID, "are you there?", 0, used, limit, 5*time.Second, false)
	last := got[len(got)-1].ev.Seq
	// One attempt: the CLI did not retry.
	denied := 0
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, `"msg":"gateway: denied"`) && strings.Contains(line, `"status":429`) {
			denied++
		}
	}
	if denied != 1 {
		t.Errorf("the gateway denied %d calls, want the CLI's one attempt", denied)
	}

	setDailyLimit(t, st, 100*budget.Dollar)
	r := send(t, base, c.ID, "and now?")
	got = readStream(t, base, c.ID, last, turnEnded(r.TurnID))
	if end := got[len(got)-1].ev; end.Kind != contract.KindTurnFinished {
		t.Fatalf("after raising the limit the turn ended with %s %+v", end.Kind, end.Failure)
	}
}
