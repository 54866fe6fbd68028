package controlplane_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/trust"
)

// reportSigner is how the worker of tenant/envName signs its reports.
func (h *harness) reportSigner(envName string) *trust.Signer {
	return &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: tenant, Env: envName, KeyID: commandKID,
		Key: trust.DeriveEnvKey(commandSecret, tenant, envName), Now: h.clock.Now,
	}
}

// reportRequest builds a report request with body, signed by sg (nil: not
// signed).
func (h *harness) reportRequest(sg *trust.Signer, body []byte) *http.Request {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.url+contract.ReportsPath, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if sg != nil {
		sg.Sign(req, body)
	}
	return req
}

// send sends req with body and returns the answer with its body read.
func (h *harness) send(req *http.Request, body []byte) (*http.Response, []byte) {
	h.t.Helper()
	req.Body = io.NopCloser(bytes.NewReader(body))
	return roundtrip.With(h.t, h.client, req)
}

func batch(t testing.TB, reports ...contract.Report) []byte {
	t.Helper()
	b, err := json.Marshal(contract.ReportBatch{Reports: reports})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func usageReport(key, conversation string) contract.Report {
	return contract.Report{
		IdempotencyKey: key, Kind: contract.ReportUsage, ConversationID: conversation, TurnID: "t_1", Time: start,
		Usage: &contract.Usage{Model: "m", InputTokens: 50, OutputTokens: 12},
	}
}

func sampleBatch(t *testing.T) ([]byte, []contract.Report) {
	rs := []contract.Report{
		usageReport("demo/usage-1", "demo"),
		{IdempotencyKey: "demo/tool-1", Kind: contract.ReportToolUse, ConversationID: "demo", TurnID: "t_1", Time: start.Add(time.Second),
			Tool: &contract.ToolReport{ID: "toolu_1", Name: "Bash", DurationMS: 4}},
		{IdempotencyKey: "demo/r-1", Kind: contract.ReportActivity, ConversationID: "demo", Time: start.Add(2 * time.Second), Activity: "ran the tests"},
	}
	return batch(t, rs...), rs
}

func (h *harness) storedReports(conversation string) []contract.Report {
	h.t.Helper()
	srs, err := h.store.ListReports(h.t.Context(), conversation)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []contract.Report
	for _, sr := range srs {
		if sr.Tenant != tenant || sr.Env != env {
			h.t.Errorf("report %s stored under %s/%s", sr.Report.IdempotencyKey, sr.Tenant, sr.Env)
		}
		out = append(out, sr.Report)
	}
	return out
}

func TestReportsAccepted(t *testing.T) {
	h := demoHarness(t)
	body, rs := sampleBatch(t)

	steps := []struct {
		name string
		body []byte
		want contract.ReportAck
	}{
		{"first", body, contract.ReportAck{Accepted: 3}},
		{"resent", body, contract.ReportAck{Duplicates: 3}},
		{"partly new", batch(t, rs[0], usageReport("demo/usage-2", "demo"), usageReport("demo/usage-2", "demo")), contract.ReportAck{Accepted: 1, Duplicates: 2}},
		{"empty", batch(t), contract.ReportAck{}},
	}
	for _, s := range steps {
		resp, data := h.send(h.reportRequest(h.reportSigner(env), s.body), s.body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status = %d: %s", s.name, resp.StatusCode, data)
		}
		var got contract.ReportAck
		decodeJSON(t, data, &got)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: ack (-want +got):\n%s", s.name, diff)
		}
	}
	// ListReports orders by time, then key.
	want := []contract.Report{rs[0], usageReport("demo/usage-2", "demo"), rs[1], rs[2]}
	if diff := cmp.Diff(want, h.storedReports("demo")); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
}

func TestReportsRefused(t *testing.T) {
	type setup struct {
		h    *harness
		body []byte
	}
	signed := func(sg func(*harness) *trust.Signer) func(setup) *http.Request {
		return func(s setup) *http.Request { return s.h.reportRequest(sg(s.h), s.body) }
	}
	// byEnv signs with the env's own signer, as change leaves it.
	byEnv := func(change func(h *harness, sg *trust.Signer)) func(setup) *http.Request {
		return signed(func(h *harness) *trust.Signer {
			sg := h.reportSigner(env)
			if change != nil {
				change(h, sg)
			}
			return sg
		})
	}
	tests := map[string]struct {
		body       func(*testing.T) []byte // nil: the sample batch
		request    func(setup) *http.Request
		wantStatus int
		wantCode   string
	}{
		"unsigned": {
			request:    func(s setup) *http.Request { return s.h.reportRequest(nil, s.body) },
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"wrong key": {
			request:    byEnv(func(h *harness, sg *trust.Signer) { sg.Key = bytes.Repeat([]byte("w"), 32) }),
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"master secret instead of the env key": {
			request:    byEnv(func(h *harness, sg *trust.Signer) { sg.Key = commandSecret }),
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"direction to worker": {
			request:    byEnv(func(h *harness, sg *trust.Signer) { sg.Direction = trust.ToWorker }),
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"unknown key id": {
			request:    byEnv(func(h *harness, sg *trust.Signer) { sg.KeyID = "c2" }),
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"env not in the store": {
			request:    signed(func(h *harness) *trust.Signer { return h.reportSigner("ghost") }),
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"stale timestamp": {
			request: byEnv(func(h *harness, sg *trust.Signer) {
				sg.Now = func() time.Time { return h.clock.Now().Add(-2 * trust.MaxClockSkew) }
			}),
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"body changed after signing": {
			request: func(s setup) *http.Request {
				req := s.h.reportRequest(s.h.reportSigner(env), s.body)
				other := batch(s.h.t, usageReport("demo/forged", "demo"))
				req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(other)), int64(len(other))
				return req
			},
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"signed by the other env": {
			request:    signed(func(h *harness) *trust.Signer { return h.reportSigner(otherEnv) }),
			wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden,
		},
		"another env's conversation in the batch": {
			body: func(t *testing.T) []byte {
				return batch(t, usageReport("demo/ok", "demo"), usageReport("elsewhere/1", "elsewhere"))
			},
			request:    byEnv(nil),
			wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden,
		},
		"unknown conversation": {
			body:       func(t *testing.T) []byte { return batch(t, usageReport("x/1", "nobody")) },
			request:    byEnv(nil),
			wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden,
		},
		"unknown kind": {
			body: func(t *testing.T) []byte {
				r := usageReport("demo/k", "demo")
				r.Kind = "issue"
				return batch(t, usageReport("demo/ok", "demo"), r)
			},
			request:    byEnv(nil),
			wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest,
		},
		"empty idempotency key": {
			body:       func(t *testing.T) []byte { return batch(t, usageReport("demo/ok", "demo"), usageReport("", "demo")) },
			request:    byEnv(nil),
			wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest,
		},
		"bad conversation id": {
			body: func(t *testing.T) []byte {
				return batch(t, usageReport("demo/ok", "demo"), usageReport("x/2", "../demo"))
			},
			request:    byEnv(nil),
			wantStatus: http.StatusBadRequest, wantCode: contract.CodeInvalidID,
		},
		"unknown field": {
			body:       func(*testing.T) []byte { return []byte(`{"reports":[],"extra":1}`) },
			request:    byEnv(nil),
			wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest,
		},
		"body over 1 MiB": {
			body:       func(*testing.T) []byte { return bytes.Repeat([]byte(" "), contract.MaxReportBatch+1) },
			request:    byEnv(nil),
			wantStatus: http.StatusRequestEntityTooLarge, wantCode: contract.CodeTooLarge,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := demoHarness(t)
			h.insertConversation("elsewhere", user, otherEnv)
			body, _ := sampleBatch(t)
			if tt.body != nil {
				body = tt.body(t)
			}
			req := tt.request(setup{h: h, body: body})
			resp, data := roundtrip.With(t, h.client, req)
			wantError(t, resp, data, tt.wantStatus, tt.wantCode)
			for _, c := range []string{"demo", "elsewhere", "nobody"} {
				if got, err := h.store.ListReports(t.Context(), c); err != nil || len(got) != 0 {
					t.Errorf("stored for %s: %v, %v; want nothing", c, got, err)
				}
			}
		})
	}
}

func TestReportReplayRefused(t *testing.T) {
	h := demoHarness(t)
	body, _ := sampleBatch(t)
	req := h.reportRequest(h.reportSigner(env), body)
	resp, data := h.send(req, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first: status = %d: %s", resp.StatusCode, data)
	}
	// The same bytes again, signature included: a replay, even though the
	// batch itself would only count duplicates.
	replay := h.reportRequest(nil, body)
	replay.Header.Set(trust.SignatureHeader, req.Header.Get(trust.SignatureHeader))
	resp, data = h.send(replay, body)
	wantError(t, resp, data, http.StatusUnauthorized, contract.CodeUnauthorized)
	if got := len(h.storedReports("demo")); got != 3 {
		t.Errorf("stored %d reports, want 3", got)
	}
}
