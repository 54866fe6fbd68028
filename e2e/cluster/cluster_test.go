package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/contract"
)

// env is the cluster as scripts/cluster.sh up describes it.
type env struct {
	url, kubeconfig, token string
	client                 *chatclient.Client
}

// clusterEnv returns the cluster under test. Without scripts/cluster.sh's
// variables the test fails, saying how to get them; TALKIDE_CLUSTER=skip
// skips it.
func clusterEnv(t *testing.T) *env {
	t.Helper()
	if os.Getenv("TALKIDE_CLUSTER") == "skip" {
		t.Skip("TALKIDE_CLUSTER=skip: the tests on a real cluster are skipped")
	}
	e := &env{url: os.Getenv("TALKIDE_URL"), kubeconfig: os.Getenv("KUBECONFIG")}
	tokenFile := os.Getenv("TALKIDE_TOKEN_FILE")
	if e.url == "" || e.kubeconfig == "" || tokenFile == "" || os.Getenv("TALKIDE_NETNS") == "" {
		t.Fatal("no cluster: run ./scripts/test.sh, which brings one up, or eval \"$(./scripts/cluster.sh up)\" first (TALKIDE_CLUSTER=skip skips these tests)")
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	e.token = strings.TrimSpace(string(token))
	if e.client, err = chatclient.New(e.url, &chatclient.Options{Token: e.token}); err != nil {
		t.Fatal(err)
	}
	return e
}

// kubectl runs kubectl against the cluster and returns its standard
// output.
func (e *env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	// Not cancelled with the test: cleanups run kubectl too.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 2*time.Minute)
	defer cancel()
	out, err := e.kubectlCmd(ctx, nil, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// kubectlCmd runs kubectl with stdin and returns its standard output
// alone: kubectl's own warnings on standard error (an exec's websocket
// notes) would spoil the JSON a command prints. The error carries both.
func (e *env) kubectlCmd(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String(), nil
}

// conversation creates a conversation of the user e2e in acme/dev, named
// (the user may belong to other envs of acme that tests add).
func (e *env) conversation(t *testing.T) string {
	t.Helper()
	id, err := e.tryConversation(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// tryConversation is conversation for goroutines other than the test's.
func (e *env) tryConversation(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/api/conversations", strings.NewReader(`{"tenant":"acme","env":"dev"}`))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var c struct {
		ID string `json:"id"`
	}
	if err == nil && resp.StatusCode == http.StatusCreated {
		err = json.Unmarshal(body, &c)
	}
	if err != nil || resp.StatusCode != http.StatusCreated || c.ID == "" {
		// The answer's own words: a refusal says what was wrong.
		return "", fmt.Errorf("create a conversation: %s %v: %.1000s", resp.Status, err, body)
	}
	return c.ID, nil
}

// errTurnEnded stops a stream at the end of the turn awaited.
var errTurnEnded = errors.New("turn ended")

// turn sends text to conversation id and returns the turn's events, up to
// its end, as the browser API streams them.
func (e *env) turn(t *testing.T, id, text string) []contract.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r, err := e.client.Send(ctx, id, text)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	var got []contract.Event
	err = e.client.Stream(ctx, id, 0, func(ev contract.Event) error {
		if ev.TurnID == r.TurnID {
			got = append(got, ev)
			if contract.Terminal(ev.Kind) {
				return errTurnEnded
			}
		}
		return nil
	})
	if !errors.Is(err, errTurnEnded) {
		t.Fatalf("turn %s: the stream ended with %v after %d events", r.TurnID, err, len(got))
	}
	return got
}

// bashCall is the message whose turn runs command with Bash, allowed
// timeoutMS to finish.
func bashCall(command string, timeoutMS int) string {
	in, _ := json.Marshal(map[string]any{"command": command, "timeout": timeoutMS})
	return "[[tool:Bash " + string(in) + "]]"
}

// bashRunning sends a turn that runs command with conversation id's Bash
// and returns once stream carries the command's first output.
func (e *env) bashRunning(t *testing.T, ctx context.Context, stream *browserStream, id, command string, timeoutMS int) contract.SendMessageResponse {
	t.Helper()
	r, err := e.client.Send(ctx, id, bashCall(command, timeoutMS))
	if err != nil {
		t.Fatal(err)
	}
	stream.await(t, "the command's output", time.Minute, func(ev contract.Event) bool {
		return ev.TurnID == r.TurnID && ev.Kind == contract.KindToolOutput
	})
	return r
}

// bash runs command with conversation id's Bash and returns the result.
func (e *env) bash(t *testing.T, id, command string) contract.ToolEvent {
	t.Helper()
	for _, ev := range e.turn(t, id, bashCall(command, 120000)) {
		if ev.Kind == contract.KindToolFinished {
			return *ev.Tool
		}
	}
	t.Fatalf("no tool.finished for %q", command)
	return contract.ToolEvent{}
}

// TestTurnThroughTheCluster: a turn goes browser API → control-plane →
// the worker's Service by its DNS name → the gateway → the simulator and
// back; Bash runs in the worker pod's sandbox as the pod's user, and the
// worker's start-up log names the layers it has there: the first alone,
// since a restricted pod allows no user namespaces.
func TestTurnThroughTheCluster(t *testing.T) {
	e := clusterEnv(t)
	t.Parallel() // leaves acme/dev's worker running: see the package comment
	id := e.conversation(t)
	var reply string
	for _, ev := range e.turn(t, id, "hello from the cluster") {
		if ev.Kind == contract.KindMessage {
			reply += ev.Text
		}
		if ev.Kind == contract.KindTurnFailed {
			t.Fatalf("the turn failed: %+v", ev)
		}
	}
	if !strings.Contains(reply, "[simulator]") || !strings.Contains(reply, "hello from the cluster") {
		t.Errorf("reply %q", reply)
	}
	res := e.bash(t, id, "id -u; grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status")
	if res.IsError || !strings.Contains(res.Output, "65532\n") || !strings.Contains(res.Output, "Seccomp:\t2") ||
		!strings.Contains(res.Output, "NoNewPrivs:\t1") || !strings.Contains(res.Output, "CapEff:\t0000000000000000") {
		t.Errorf("Bash in the worker pod: %+v", res)
	}
	logs := e.kubectl(t, "-n", "acme-dev", "logs", "deployment/talkide-worker")
	if !strings.Contains(logs, "agent commands run in the sandbox") || !strings.Contains(logs, `layers="[env landlock seccomp]"`) {
		t.Errorf("the worker's start-up log does not name the first layer alone:\n%s", logs)
	}
	url := e.kubectl(t, "-n", "acme-dev", "get", "service", "talkide-worker", "-o", "jsonpath={.metadata.name}.{.metadata.namespace}")
	if url != "talkide-worker.acme-dev" {
		t.Errorf("the worker's Service: %q", url)
	}
}
