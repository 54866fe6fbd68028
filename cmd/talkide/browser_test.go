package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	opstorage "github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/syncbuf"
)

// browserReady returns the Chromium to drive, or fails (on CI, or with
// TALKIDE_REQUIRE_BROWSER=1) or skips the test when it or playwright-core
// (installed by scripts/web.sh into web/node_modules) is missing.
func browserReady(t testing.TB) string {
	t.Helper()
	exe := os.Getenv("TALKIDE_CHROMIUM")
	if exe == "" {
		exe = "/usr/bin/chromium"
	}
	missing := ""
	if _, err := os.Stat(exe); err != nil {
		missing = "Chromium (" + exe + "; scripts/chromium.sh installs it)"
	} else if _, err := os.Stat("../../web/node_modules/playwright-core/package.json"); err != nil {
		missing = "playwright-core (scripts/web.sh installs it)"
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node"
	}
	if missing != "" {
		if os.Getenv("CI") != "" || os.Getenv("TALKIDE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("the browser tests need %s", missing)
		}
		t.Skipf("no %s: the browser tests are skipped (./scripts/test.sh installs what they need)", missing)
	}
	return exe
}

// browserParallel checks what a browser test needs, as browserReady does,
// and runs the test beside the other browser tests. Each has a stack and a
// Chromium of its own, and most of a scenario's time is the page waiting
// for a stream or a timer: one after another they took five and a half
// minutes with a third of the CPUs idle. Go runs them after the package's
// other tests, at most -parallel (GOMAXPROCS) at a time.
func browserParallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	browserReady(t)
}

// runScenario drives one scenario of web/test/scenarios.mjs against st and
// returns what it reported; onStep does what the scenario asks of the Go
// side. Screenshots stay in the printed directory when the test fails.
func runScenario(t testing.TB, st *roles.Dev, name string, onStep func(string)) map[string]any {
	t.Helper()
	return runScenarioEnv(t, st, name, nil, onStep)
}

// runScenarioEnv is runScenario with more of the scenario's environment.
func runScenarioEnv(t testing.TB, st *roles.Dev, name string, env []string, onStep func(string)) map[string]any {
	t.Helper()
	exe := browserReady(t)
	shots := os.Getenv("TALKIDE_ARTIFACTS")
	if shots != "" {
		shots = filepath.Join(shots, t.Name())
		os.MkdirAll(shots, 0o755)
	} else {
		var err error
		// A subtest's name has a slash, which a temporary name may not.
		if shots, err = os.MkdirTemp("", "talkide-"+strings.ReplaceAll(t.Name(), "/", "-")+"-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(shots)
			}
		})
	}
	t.Logf("screenshots: %s", shots)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "../../web/test/driver.mjs", name)
	cmd.Env = append(append(os.Environ(), "TALKIDE_URL="+st.Info.ControlPlane, "TALKIDE_CHROMIUM="+exe, "TALKIDE_ARTIFACTS="+shots), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var result map[string]any
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "STEP "):
			onStep(strings.TrimPrefix(line, "STEP "))
			stdin.Write([]byte("ok\n"))
		case strings.HasPrefix(line, "RESULT "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &result); err != nil {
				t.Errorf("scenario result: %v", err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scenario %s: %v\n%s", name, err, stderr.String())
	}
	return result
}

func noSteps(t *testing.T) func(string) {
	return func(s string) { t.Errorf("unexpected step %q", s) }
}

// restartStep answers a scenario's one step, name, with restart.
func restartStep(t *testing.T, name string, restart func(context.Context) error) func(string) {
	return func(step string) {
		if step != name {
			t.Errorf("unexpected step %q", step)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := restart(ctx); err != nil {
			t.Errorf("restart: %v", err)
		}
	}
}

// TestBrowserLogin: a control-plane without the local user, logging in
// with OpenID Connect at zitadel/oidc's example provider (a real one: its
// login form, the authorization code flow with PKCE, signed ID tokens).
// Chromium opens the UI, follows its Log in link to the provider's form,
// lands back on the app, streams a turn, and logs out, after which the
// API answers 401. The session cookie's flags are checked as Chromium
// kept them. The control-plane is plain http on 127.0.0.1, which Chromium
// counts as a secure context, so it keeps and sends the Secure
// __Host-talkide_session cookie there as it would over https.
func TestBrowserLogin(t *testing.T) {
	browserParallel(t)
	opLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	// The control-plane's address is in the client's redirect URL, which
	// the provider needs before either starts: take a free port.
	cpLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	cpAddr := cpLn.Addr().String()
	cpLn.Close()
	issuer := "http://" + opLn.Addr().String()
	clientID := "talkide-browser-" + cpAddr
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "oidc-secret")
	must(t, os.WriteFile(secretFile, []byte("client-secret\n"), 0o600))
	opstorage.RegisterClients(opstorage.WebClient(clientID, "client-secret", "http://"+cpAddr+"/auth/callback"))
	op := httptest.NewUnstartedServer(exampleop.SetupServer(issuer, opstorage.NewStorage(opstorage.NewUserStore(issuer)), nil, false))
	op.Listener.Close()
	op.Listener = opLn
	op.Start()
	t.Cleanup(op.Close)

	logs := &syncbuf.Buffer{}
	st := startDevT(t, roles.DevConfig{
		DataDir: filepath.Join(dir, "data"), Addr: cpAddr,
		Login: &roles.AuthConfig{
			OIDCIssuer: issuer, OIDCClientID: clientID, OIDCClientSecretFile: secretFile,
			OIDCRedirectURL: "http://" + cpAddr + "/auth/callback", OIDCUserClaim: auth.DefaultUserClaim,
			SessionIdle: time.Hour, SessionAbsolute: 2 * time.Hour,
		},
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	ctx := t.Context()
	must(t, st.ControlPlane.Store.PutUser(ctx, store.User{ID: "test-user2", Name: "test-user2", CreatedAt: time.Now().UTC()}))
	_, err = st.ControlPlane.Store.PutMembership(ctx, store.Membership{UserID: "test-user2", Tenant: roles.DevTenant, Role: store.RoleMember, CreatedAt: time.Now().UTC()})
	must(t, err)
	// Without a login the API refuses, as the page will find.
	if code := api(t, "GET", st.Info.ControlPlane+"/api/conversations", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("the API without a login: %d, want 401", code)
	}

	res := runScenarioEnv(t, st, "login", []string{
		"TALKIDE_ALLOW_ORIGINS=" + issuer, "TALKIDE_OP=" + issuer,
		"TALKIDE_OP_USER=test-user2", "TALKIDE_OP_PASSWORD=verysecure",
	}, noSteps(t))
	ck, _ := res["cookie"].(map[string]any)
	if ck["secure"] != true || ck["httpOnly"] != true || ck["sameSite"] != "Lax" || ck["path"] != "/" || ck["domain"] != "127.0.0.1" {
		t.Errorf("the session cookie as Chromium kept it: %v; want Secure, HttpOnly, SameSite=Lax, Path=/, host-only", ck)
	}
	if exp, _ := ck["expires"].(float64); exp <= float64(time.Now().Unix()) || exp > float64(time.Now().Add(2*time.Hour+time.Minute).Unix()) {
		t.Errorf("the session cookie expires at %v, want within --session-absolute", ck["expires"])
	}
	conv, _ := res["conversation"].(string)
	c, err := st.ControlPlane.Store.GetConversation(ctx, conv)
	if err != nil || c.UserID != "test-user2" {
		t.Errorf("the conversation the browser started: %+v, %v", c, err)
	}
	if strings.Contains(logs.String(), "client-secret") {
		t.Error("the log holds the client secret")
	}
}

// TestBrowserScenarios runs the scenarios that need nothing but a fresh
// stack and check everything themselves, in the page: streaming, an
// interrupt, hostile markdown, an edit's diff and an issue.
func TestBrowserScenarios(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"stream", "interrupt", "hostile", "edit"} {
		t.Run(name, func(t *testing.T) {
			browserParallel(t)
			st, _ := startTestStack(t)
			runScenario(t, st, name, noSteps(t))
		})
	}
}

func TestBrowserReload(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	res := runScenario(t, st, "reload", noSteps(t))
	domMatchesLog(t, st, res, true)
}

// domMatchesLog compares what a scenario's page showed (domSeqs: every
// element's data-seqs, in document order) with the conversation's log as
// the server streams it (after the history page a reloaded page opened
// with, when the scenario reports one): every sequence number once, none
// missing, and,
// with inOrder, in the log's order (a page without sub-agents, whose
// nested cards put a Task's own later events before its sub-agent's).
func domMatchesLog(t *testing.T, st *roles.Dev, res map[string]any, inOrder bool) []int64 {
	t.Helper()
	conv, _ := res["conversation"].(string)
	raw, _ := res["domSeqs"].([]any)
	if conv == "" || len(raw) == 0 {
		t.Fatalf("the scenario reported no conversation or no sequence numbers: %v", res)
	}
	var dom []int64
	for _, v := range raw {
		f, _ := v.(float64)
		dom = append(dom, int64(f))
	}
	var logged []int64
	// A page that was reloaded shows its history page up to its last_seq
	// (compacted, when the turn had ended by then) and the log after it.
	var upTo int64
	if h, ok := res["history"].(map[string]any); ok {
		last, _ := h["last_seq"].(float64)
		upTo = int64(last)
		seqs, _ := h["seqs"].([]any)
		for _, v := range seqs {
			f, _ := v.(float64)
			logged = append(logged, int64(f))
		}
		t.Logf("the reloaded page opened with the log up to %d", upTo)
	}
	for _, e := range readStream(t, st.Info.ControlPlane, conv, 0, func(ev contract.Event) bool { return contract.Terminal(ev.Kind) }) {
		if e.ev.Seq > upTo {
			logged = append(logged, e.ev.Seq)
		}
	}
	got := dom
	if !inOrder {
		got = slices.Clone(dom)
		slices.Sort(got)
	}
	if !slices.Equal(got, logged) {
		seen := map[int64]int{}
		for _, s := range dom {
			seen[s]++
		}
		var missing, twice []int64
		for _, s := range logged {
			if seen[s] == 0 {
				missing = append(missing, s)
			}
		}
		for s, n := range seen {
			if n > 1 {
				twice = append(twice, s)
			}
		}
		t.Fatalf("the page shows events %v, the log holds %v (missing %v, shown more than once %v)", dom, logged, missing, twice)
	}
	return logged
}

func TestBrowserRestartControlPlane(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	res := runScenario(t, st, "restart", restartStep(t, "restart-controlplane", st.RestartControlPlane))
	domMatchesLog(t, st, res, true)
}

// TestBrowserSubAgent: the simulator scripts a Task call (a test and demo
// tool: [[tool:Task …]] with the sub-agent's own directives in its prompt);
// the page nests the sub-agent's cards under the Task card, live and after
// a reload from the compacted history, and shows every event of the log.
func TestBrowserSubAgent(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	res := runScenario(t, st, "subagent", noSteps(t))
	logged := domMatchesLog(t, st, res, false)
	// The sub-agent's events in the log carry the Task call's id.
	var parents int
	for _, e := range readStream(t, st.Info.ControlPlane, res["conversation"].(string), 0, func(ev contract.Event) bool { return contract.Terminal(ev.Kind) }) {
		if e.ev.ParentToolUseID != "" {
			parents++
		}
	}
	if parents == 0 {
		t.Fatalf("no event of the %d in the log names a parent Task call", len(logged))
	}
	// After the reload the page shows the compacted history, all of it.
	var page struct {
		Events []contract.Event `json:"events"`
	}
	api(t, "GET", st.Info.ControlPlane+"/api/conversations/"+res["conversation"].(string)+"/events?limit=1000", nil, &page)
	var want []int64
	for _, ev := range page.Events {
		want = append(want, ev.Seq)
	}
	var got []int64
	for _, v := range res["reloadedSeqs"].([]any) {
		got = append(got, int64(v.(float64)))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("after the reload the page shows %v, the history %v", got, want)
	}
}

// TestHistoryEndpoint: against a real worker, a finished turn's page holds
// no deltas or output chunks, and walking back page by page with ?before=
// gives every compacted event once, in order. The UI is served beside the
// API, whose unknown paths stay JSON.
func TestHistoryEndpoint(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	r := send(t, base, c.ID, `list [[tool:Bash {"command":"echo one; echo two"}]]`)
	readStream(t, base, c.ID, 0, turnEnded(r.TurnID))

	type page struct {
		Events   []contract.Event `json:"events"`
		FirstSeq int64            `json:"first_seq"`
		LastSeq  int64            `json:"last_seq"`
		HasMore  bool             `json:"has_more"`
	}
	var all page
	if code := api(t, "GET", base+"/api/conversations/"+c.ID+"/events", nil, &all); code != 200 || all.HasMore {
		t.Fatalf("history: %d has_more=%v", code, all.HasMore)
	}
	kinds := map[string]int{}
	for _, ev := range all.Events {
		kinds[ev.Kind]++
	}
	if kinds[contract.KindTextDelta] != 0 || kinds[contract.KindToolOutput] != 0 || kinds[contract.KindMessage] == 0 || kinds[contract.KindToolFinished] != 1 || kinds[contract.KindTurnFinished] != 1 {
		t.Fatalf("the compacted page holds %v", kinds)
	}
	if last := all.Events[len(all.Events)-1].Seq; last != all.LastSeq {
		t.Fatalf("the page ends at %d, last_seq is %d", last, all.LastSeq)
	}
	var walked []int64
	before := ""
	for range 100 {
		var p page
		api(t, "GET", base+"/api/conversations/"+c.ID+"/events?limit=3"+before, nil, &p)
		var seqs []int64
		for _, ev := range p.Events {
			seqs = append(seqs, ev.Seq)
		}
		walked = append(seqs, walked...)
		if !p.HasMore {
			break
		}
		before = fmt.Sprintf("&before=%d", p.FirstSeq)
	}
	if len(walked) != len(all.Events) {
		t.Fatalf("paging gave %v, want the %d events of the whole page", walked, len(all.Events))
	}
	for i, ev := range all.Events {
		if walked[i] != ev.Seq {
			t.Fatalf("paging gave %v", walked)
		}
	}

	resp, err := http.Get(base + "/c/" + c.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET /c/…: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if code := api(t, "GET", base+"/api/nope", nil, nil); code != 404 {
		t.Fatalf("GET /api/nope: %d", code)
	}
}

// BenchmarkWebUILongConversation seeds a conversation of about 5,000
// events through the real stack (turns whose replies stream in about 100
// deltas each, with the simulator) and has headless Chromium open it and
// then stream a reply at about 200 deltas/s (the "longconv" scenario). It
// reports the time from navigation to the last message rendered, and the
// long tasks (over 50 ms, as Chromium counts them) while opening and while
// streaming, the longest of them too. One run is one page: use
// -benchtime=1x (docs/benchmarks.md has the figures).
func BenchmarkWebUILongConversation(b *testing.B) {
	browserReady(b)
	st, _ := startTestStack(b)
	base := st.Info.ControlPlane
	c := createConversation(b, base)
	// 300 words: the simulator streams three words a delta.
	text := "Seed the conversation. " + strings.Repeat("lorem ipsum dolor ", 100)
	var last, lastMessage int64
	for last < 5000 {
		r := send(b, base, c.ID, text)
		for _, e := range readStream(b, base, c.ID, r.Seq-1, turnEnded(r.TurnID)) {
			last = e.ev.Seq
			if e.ev.Kind == contract.KindMessage {
				lastMessage = e.ev.Seq
			}
		}
	}
	b.Logf("seeded %d events; the last message is event %d", last, lastMessage)
	b.Setenv("TALKIDE_BENCH_CONVERSATION", c.ID)
	b.Setenv("TALKIDE_BENCH_LAST_MESSAGE", strconv.FormatInt(lastMessage, 10))
	var res map[string]any
	for b.Loop() {
		res = runScenario(b, st, "longconv", func(s string) { b.Errorf("unexpected step %q", s) })
	}
	longest := func(key string) (n, over100 float64, max float64) {
		list, _ := res[key].([]any)
		for _, v := range list {
			d, _ := v.(float64)
			n++
			if d > 100 {
				over100++
			}
			max = math.Max(max, d)
		}
		return n, over100, max
	}
	ms, _ := res["lastMessageMs"].(float64)
	b.ReportMetric(ms, "ms-to-last-message")
	rendered, _ := res["renderedMs"].(float64)
	b.ReportMetric(rendered, "ms-to-whole-page")
	n, over, maxMs := longest("loadLongTasks")
	b.ReportMetric(n, "long-tasks-opening")
	b.ReportMetric(maxMs, "longest-task-opening-ms")
	n, over, maxMs = longest("streamLongTasks")
	b.ReportMetric(n, "long-tasks-streaming")
	b.ReportMetric(over, "tasks-over-100ms-streaming")
	b.ReportMetric(maxMs, "longest-task-streaming-ms")
	streamMs, _ := res["streamMs"].(float64)
	b.ReportMetric(streamMs, "ms-streaming-500-deltas")
}
