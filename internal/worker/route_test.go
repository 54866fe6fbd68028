package worker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/replicaset"
)

// counting counts the requests that reach a handler.
func counting(n *atomic.Int64) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			h.ServeHTTP(w, r)
		})
	}
}

// replicaPair is two replicas on one volume, each knowing the other from
// the registry; reached counts the requests reaching a.
func replicaPair(t testing.TB) (a, b *testWorker, reached *atomic.Int64) {
	t.Helper()
	reached = new(atomic.Int64)
	a = newTestWorker(t, workerOpts{holder: "replica-a", replicas: true, wrap: counting(reached)})
	b = newTestWorker(t, workerOpts{dir: a.dir, holder: "replica-b", replicas: true})
	refresh(t, a, b)
	return a, b, reached
}

// refresh publishes every replica's entry and has each read the others',
// as their registry loops would.
func refresh(t testing.TB, ws ...*testWorker) {
	t.Helper()
	for _, tw := range ws {
		if err := tw.w.router.replicas.Publish(tw.w.ReplicaEntry); err != nil {
			t.Fatal(err)
		}
	}
	for _, tw := range ws {
		if _, err := tw.w.router.replicas.Read(); err != nil {
			t.Fatal(err)
		}
	}
}

// A command about a conversation another replica holds is forwarded to it
// and its answer, an event stream included, comes back as the holder gave
// it; the receiving replica opens nothing.
func TestForwardToTheHolder(t *testing.T) {
	a, b, reached := replicaPair(t)
	a.create(t, "c_held")
	if got := b.state(t, "c_held"); got.ConversationID != "c_held" {
		t.Fatalf("state through b: %+v", got)
	}
	st := b.openStream(t, "c_held", "", "")
	status, sent := b.sendMessage(t, "c_held", "m1", "hello")
	if status != http.StatusAccepted {
		t.Fatalf("send through b: %d", status)
	}
	turn := a.h.next(t) // the turn runs on the holder
	turn.Emit(contract.Event{Kind: contract.KindMessage, Text: "hi"})
	// Flushed as it comes: the event arrives through b while the turn
	// still runs.
	st.mustUntil(t, func(ev contract.Event) bool { return ev.Kind == contract.KindMessage && ev.Text == "hi" })
	turn.finish("end_turn")
	evs := st.mustUntil(t, func(ev contract.Event) bool { return ev.TurnID == sent.TurnID && contract.Terminal(ev.Kind) })
	if last := evs[len(evs)-1].Ev; last.Kind != contract.KindTurnFinished {
		t.Fatalf("the stream through b ended with %+v", last)
	}
	if lb := b.w.Load(); lb.OpenSessions != 0 || lb.ForwardedHolder != 3 || lb.Elsewhere != 0 {
		t.Errorf("b's load: %+v, want 3 commands forwarded, nothing open", lb)
	}
	if reached.Load() < 4 { // the create, and the three b forwarded
		t.Errorf("%d requests reached the holder", reached.Load())
	}
}

// A forwarded command's span on the holder is the child of the span of
// the replica that forwarded it, which is the child of the control-plane's.
func TestForwardedTraceIsOneChain(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	a := newTestWorker(t, workerOpts{holder: "replica-a", replicas: true, tracer: tp})
	b := newTestWorker(t, workerOpts{dir: a.dir, holder: "replica-b", replicas: true, tracer: tp})
	refresh(t, a, b)
	a.create(t, "c_traced")
	exp.Reset()

	ctx, root := tp.Tracer("control-plane").Start(t.Context(), "relay")
	req := b.request(t, ctx, http.MethodGet, "/v1/sessions/c_traced", nil)
	observe.Inject(ctx, req.Header)
	resp, body := send(t, req)
	root.End()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("state through b: %d %s", resp.StatusCode, body)
	}
	if lb := b.w.Load(); lb.ForwardedHolder != 1 {
		t.Fatalf("b's load: %+v, want the command forwarded", lb)
	}
	parents := map[string]string{} // server span id -> its parent's
	for _, sp := range exp.GetSpans() {
		if sp.SpanKind == trace.SpanKindServer && sp.SpanContext.TraceID() == root.SpanContext().TraceID() {
			parents[sp.SpanContext.SpanID().String()] = sp.Parent.SpanID().String()
		}
	}
	forwarder := ""
	for span, parent := range parents {
		if parent == root.SpanContext().SpanID().String() {
			forwarder = span
		}
	}
	holder := false
	for _, parent := range parents {
		holder = holder || (forwarder != "" && parent == forwarder)
	}
	if len(parents) != 2 || !holder {
		t.Errorf("server spans by parent %v: want the forwarder's under the control-plane's, the holder's under the forwarder's", parents)
	}
}

// A forwarded command is never forwarded again: the replica it reaches
// serves it or refuses it (session_elsewhere), whatever the lease says.
func TestForwardedIsNotForwardedAgain(t *testing.T) {
	a, b, reached := replicaPair(t)
	a.create(t, "c_held")
	before := reached.Load()
	req := b.request(t, t.Context(), http.MethodGet, "/v1/sessions/c_held", nil)
	req.Header.Set(ForwardedHeader, "replica-c")
	resp, body := send(t, req)
	wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeSessionElsewhere)
	if reached.Load() != before {
		t.Error("a forwarded command was forwarded again")
	}
	if lb := b.w.Load(); lb.ForwardedHolder != 0 || lb.Elsewhere != 1 {
		t.Errorf("b's load: %+v", lb)
	}
}

// Routing comes after the signature: a command whose signature fails is
// refused where it lands, and no peer sees anything of it.
func TestBadSignatureIsNotForwarded(t *testing.T) {
	a, b, reached := replicaPair(t)
	a.create(t, "c_held")
	before := reached.Load()
	for name, spoil := range map[string]func(*http.Request){
		"no signature":  func(r *http.Request) { r.Header.Del("X-Worker-Token") },
		"bad signature": func(r *http.Request) { r.Header.Set("X-Worker-Token", r.Header.Get("X-Worker-Token")+"00") },
		"replayed":      nil,
	} {
		req := b.request(t, t.Context(), http.MethodGet, "/v1/sessions/c_held", nil)
		if spoil == nil {
			again := req.Clone(t.Context())
			send(t, req) // forwarded once, legitimately
			before++
			req = again
		} else {
			spoil(req)
		}
		resp, body := send(t, req)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	if reached.Load() != before {
		t.Errorf("%d unverified commands reached the holder", reached.Load()-before)
	}
}

// A holder that cannot be reached is answered session_elsewhere, as
// before routing: its lease expires, and the retry finds a live one.
func TestUnreachableHolder(t *testing.T) {
	a, b, _ := replicaPair(t)
	a.create(t, "c_held")
	a.srv.Close()
	resp, body := b.call(t, http.MethodGet, "/v1/sessions/c_held", nil)
	wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeSessionElsewhere)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if lb := b.w.Load(); lb.Elsewhere != 1 || lb.ForwardedHolder != 0 {
		t.Errorf("b's load: %+v", lb)
	}
}

// The running-sessions listing answers for the whole tenant-env.
func TestRunningListedAcrossReplicas(t *testing.T) {
	a, b, _ := replicaPair(t)
	a.create(t, "c_a")
	b.create(t, "c_b") // b holds fewer: kept on b
	a.sendMessage(t, "c_a", "m1", "hello")
	ta := a.h.next(t)
	b.sendMessage(t, "c_b", "m1", "hello")
	tb := b.h.next(t)
	defer ta.finish("end_turn")
	defer tb.finish("end_turn")
	for _, tw := range []*testWorker{a, b} {
		resp, body := tw.call(t, http.MethodGet, contract.SessionsPath, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		got := decode[contract.RunningSessions](t, body)
		ids := map[string]bool{}
		for _, st := range got.Sessions {
			ids[st.ConversationID] = true
		}
		if len(got.Sessions) != 2 || !ids["c_a"] || !ids["c_b"] || got.Truncated {
			t.Errorf("listing: %+v, want both running turns", got)
		}
	}
	// A peer that does not answer makes the listing Truncated: its turns
	// are not taken for ended.
	a.srv.Close()
	resp, body := b.call(t, http.MethodGet, contract.SessionsPath, nil)
	if got := decode[contract.RunningSessions](t, body); resp.StatusCode != http.StatusOK || !got.Truncated || len(got.Sessions) != 1 {
		t.Errorf("with a peer gone: %d %+v", resp.StatusCode, got)
	}
}

// fill creates n conversations on tw, as forwarded to it: it keeps them.
func fill(t *testing.T, tw *testWorker, n int) {
	t.Helper()
	for i := range n {
		body := fmt.Appendf(nil, `{"conversation_id":"c_%s_%d","user_id":"user-1"}`, tw.w.router.replicas.Holder(), i)
		req := tw.request(t, t.Context(), http.MethodPost, contract.SessionsPath, body)
		req.Header.Set(ForwardedHeader, "filler")
		if resp, b := send(t, req); resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.StatusCode, b)
		}
	}
}

// A new conversation goes to the least loaded replica: one that holds
// clearly more forwards the create (and the conversation's later commands
// follow it there).
func TestPlacementForwardsToTheLeastLoaded(t *testing.T) {
	a, b, _ := replicaPair(t)
	fill(t, b, placementSlack+2)
	refresh(t, a, b)
	status, _ := b.create(t, "c_new")
	if status != http.StatusCreated {
		t.Fatalf("create: %d", status)
	}
	if la, lb := a.w.Load(), b.w.Load(); la.OpenSessions != 1 || lb.ForwardedPlacement != 1 {
		t.Fatalf("a %+v, b %+v: want c_new placed on a", la, lb)
	}
	// A draining replica takes none.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.w.Shutdown(ctx)
	refresh(t, b)
	if status, _ := b.create(t, "c_newer"); status != http.StatusCreated || b.w.Load().ForwardedPlacement != 1 {
		t.Fatalf("a draining replica was given a conversation: %d %+v", status, b.w.Load())
	}
}

// A placement's target that cannot be reached leaves the command here.
func TestPlacementTargetGone(t *testing.T) {
	a, b, _ := replicaPair(t)
	fill(t, b, placementSlack+2)
	refresh(t, a, b)
	a.srv.Close()
	if status, _ := b.create(t, "c_new"); status != http.StatusCreated {
		t.Fatalf("create: %d", status)
	}
	if lb := b.w.Load(); lb.OpenSessions != placementSlack+3 || lb.ForwardedPlacement != 0 {
		t.Fatalf("b: %+v", lb)
	}
}

func TestChoose(t *testing.T) {
	e := func(h string, open, running, max int, draining bool) replicaset.Entry {
		return replicaset.Entry{Holder: h, Addr: "http://" + net.JoinHostPort(h, "1"), OpenSessions: open, RunningTurns: running, MaxRunningTurns: max, Draining: draining}
	}
	first := func(int) int { return 0 }
	for name, c := range map[string]struct {
		self   replicaset.Entry
		peers  []replicaset.Entry
		placed map[string]int
		want   string // "" : kept here
	}{
		"alone":                {self: e("a", 50, 0, 8, false)},
		"within the slack":     {self: e("a", 10, 0, 8, false), peers: []replicaset.Entry{e("b", 10-placementSlack, 0, 8, false)}},
		"clearly more":         {self: e("a", 20, 0, 8, false), peers: []replicaset.Entry{e("b", 3, 0, 8, false), e("c", 9, 0, 8, false)}, want: "b"},
		"placed since counted": {self: e("a", 20, 0, 8, false), peers: []replicaset.Entry{e("b", 3, 0, 8, false), e("c", 9, 0, 8, false)}, placed: map[string]int{"b": 8}, want: "c"},
		"draining peer":        {self: e("a", 20, 0, 8, false), peers: []replicaset.Entry{e("b", 0, 0, 8, true)}},
		"full peer":            {self: e("a", 20, 0, 8, false), peers: []replicaset.Entry{e("b", 0, 8, 8, false)}},
		"draining self":        {self: e("a", 0, 0, 8, true), peers: []replicaset.Entry{e("b", 30, 0, 8, false)}, want: "b"},
		"busy turns first":     {self: e("a", 0, 8, 10, false), peers: []replicaset.Entry{e("b", 30, 1, 10, false)}, want: "b"},
		"no bound on turns":    {self: e("a", 9, 50, 0, false), peers: []replicaset.Entry{e("b", 2, 0, 0, false)}, want: "b"},
		"every one unusable":   {self: e("a", 9, 0, 8, true), peers: []replicaset.Entry{e("b", 0, 8, 8, false)}},
	} {
		got, ok := choose(c.self, c.peers, c.placed, first)
		if (c.want == "") == ok || got.Holder != c.want {
			t.Errorf("%s: chose %q (%v), want %q", name, got.Holder, ok, c.want)
		}
	}
}

// A replica that holds clearly more idle sessions than the replicas' mean
// releases the longest idle ones down to the mean; running turns and a
// draining peer's count are left alone.
func TestSpreadReleasesIdleDownToTheMean(t *testing.T) {
	a := newTestWorker(t, workerOpts{holder: "replica-a", replicas: true, rebalanceIdle: 1})
	const n = 20
	for i := range n {
		a.create(t, fmt.Sprintf("c%02d", i))
	}
	a.sendMessage(t, "c00", "m1", "hello")
	turn := a.h.next(t)
	defer turn.finish("end_turn")
	b := newTestWorker(t, workerOpts{dir: a.dir, holder: "replica-b", replicas: true})
	refresh(t, a, b)
	a.w.spread(t.Context())
	la := a.w.Load()
	if la.OpenSessions != n/2 || la.ReleasedRebalance != n/2 {
		t.Fatalf("after spreading: %+v, want %d open, %d released", la, n/2, n/2)
	}
	if !a.w.holds("c00") {
		t.Error("the session running a turn was released")
	}
	// The released ones move to b at their next command.
	if got := b.state(t, "c01"); got.ConversationID != "c01" || b.w.Load().OpenSessions != 1 || b.w.Load().ForwardedHolder != 0 {
		t.Errorf("c01 after its release: %+v, b %+v", got, b.w.Load())
	}
	// Balanced now: nothing more moves.
	refresh(t, a, b)
	a.w.spread(t.Context())
	if got := a.w.Load().ReleasedRebalance; got != n/2 {
		t.Errorf("a balanced replica released more: %d", got)
	}
}

// BenchmarkState reads a conversation's state from its holder and through
// a peer that forwards it: the cost of a hop on loopback.
func BenchmarkState(b *testing.B) {
	holder, peer, _ := replicaPair(b)
	holder.create(b, "c_bench")
	for name, tw := range map[string]*testWorker{"direct": holder, "forwarded": peer} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if resp, body := tw.call(b, http.MethodGet, "/v1/sessions/c_bench", nil); resp.StatusCode != http.StatusOK {
					b.Fatalf("%d %s", resp.StatusCode, body)
				}
			}
		})
	}
}
