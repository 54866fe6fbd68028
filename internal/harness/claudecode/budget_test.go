package claudecode

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
)

// testdata/budget_denied.jsonl is what the pinned CLI (2.1.328) printed for
// a turn whose first model call the gateway refused with a budget denial
// (429, x-should-retry: false): it did not retry, and its result carries
// only the error's message.
func TestBudgetDeniedTranscript(t *testing.T) {
	data, err := os.ReadFile("testdata/budget_denied.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	g := mapTranscript(t, data)
	want := &contract.TurnFailure{
		Code: contract.FailBudgetExhausted, HTTPStatus: 429,
		Message: "the budget is exhausted: user local spending limit per day reached: $0.0213 used, $0.00 held by calls in flight, this call needs $0.0197, the limit is $0.01; room frees up at 2026-12-02T00:00:00Z",
	}
	if diff := cmp.Diff(want, g.Failure); diff != "" {
		t.Errorf("failure (-want +got):\n%s", diff)
	}
	if len(g.Events) != 0 {
		t.Errorf("events %+v, want none: the CLI's own error text is not a reply", g.Events)
	}
}

func TestBudgetFailure(t *testing.T) {
	body := `{"type":"error","error":{"type":"rate_limit_error","message":"budget: user u1 spending limit per day reached: $5.01 used; room frees up at 2026-12-02T00:00:00Z",` +
		`"talkide_budget":{"scope":"user","subject":"u1","kind":"concurrent_requests","max":1,"held":1,"need":1,"in_flight":true}}}`
	one := int64(1)
	tests := map[string]struct {
		status int
		text   string
		want   *contract.TurnFailure // nil: not a budget denial
	}{
		"the CLI's message": {429, "API Error: Request rejected (429) · budget: user u1 spending limit per day reached: $5.01 used", &contract.TurnFailure{
			Code: contract.FailBudgetExhausted, HTTPStatus: 429, Message: "the budget is exhausted: user u1 spending limit per day reached: $5.01 used",
		}},
		"the message alone": {429, "budget: tenant acme limit of tokens per day reached", &contract.TurnFailure{
			Code: contract.FailBudgetExhausted, HTTPStatus: 429, Message: "the budget is exhausted: tenant acme limit of tokens per day reached",
		}},
		"a CLI that prints the body": {429, "API Error: 429 " + body, &contract.TurnFailure{
			Code: contract.FailBudgetExhausted, HTTPStatus: 429, Retryable: true,
			Message: "the budget is exhausted: user u1 spending limit per day reached: $5.01 used; room frees up at 2026-12-02T00:00:00Z",
			Budget:  &contract.BudgetDenial{Scope: "user", Subject: "u1", Kind: "concurrent_requests", Max: &one, Held: &one, Need: &one, InFlight: true},
		}},
		"the model API's rate limit":    {429, "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit", nil},
		"budget text in another status": {500, "API Error: 500 · budget: user u1 spending limit per day reached", nil},
		"budget mid-sentence":           {429, "API Error: Request rejected (429) · over budget: slow down", nil},
		"a body without details":        {429, `API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, nil},
		"empty":                         {429, "", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			te := budgetFailure(tc.status, tc.text, errors.New("cause"))
			if tc.want == nil {
				if te != nil {
					t.Fatalf("budgetFailure = %+v, want nil", te)
				}
				return
			}
			if te == nil {
				t.Fatal("budgetFailure = nil, want a budget denial")
			}
			got := harness.Failure(te)
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("failure (-want +got):\n%s", diff)
			}
		})
	}
}

// A result line naming a budget denial maps onto budget_exhausted; any
// other 429 stays rate_limited.
func TestResultBudgetDenied(t *testing.T) {
	tests := map[string]struct {
		line string
		code string
	}{
		"budget": {`{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error",` +
			`"result":"API Error: Request rejected (429) · budget: user u1 spending limit per day reached: $5.01 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; room frees up at 2026-12-02T00:00:00Z"}`,
			contract.FailBudgetExhausted},
		"upstream": {`{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error",` +
			`"result":"API Error: Request rejected (429) · This request would exceed your organization's rate limit"}`,
			contract.FailRateLimited},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := mapTranscript(t, []byte(tc.line+"\n"))
			if g.Failure == nil || g.Failure.Code != tc.code || g.Failure.HTTPStatus != 429 {
				t.Errorf("failure %+v, want %s", g.Failure, tc.code)
			}
		})
	}
}
