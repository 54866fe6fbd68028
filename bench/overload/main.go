// Command overload drives one talkide dev stack (the model simulator, a
// test and demo tool, answers) with many conversations turning at once,
// each running a sandboxed command, and reports what overload cost: how
// many turns finished, how many were refused up front (worker_busy) and
// sent again, and whether any turn failed, any event went unrecorded or
// any lease was lost, read from the stack's own log.
//
//	go run ./bench/overload -conversations 3000 -command 'sleep 3'
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sandbox"
)

func main() {
	sandbox.RunHelper()
	var (
		convs    = flag.Int("conversations", 3000, "conversations turning at once")
		command  = flag.String("command", "sleep 3", "the Bash command each turn runs in the sandbox")
		maxTurns = flag.Int("max-running-turns", 0, "the worker's bound (0: derived from the open-file limit)")
		deadline = flag.Duration("deadline", 15*time.Minute, "give up after this long")
		mode     = flag.String("sandbox", "auto", "the sandbox mode")
		serve    = flag.String("serve", "", "(internal) run the stack in DIR and print its URL: the stack is a process of its own, as talkide dev is, apart from the clients")
	)
	flag.Parse()
	if *serve != "" {
		if err := serveStack(*serve, *mode, *maxTurns, *convs); err != nil {
			fmt.Fprintln(os.Stderr, "overload -serve:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*convs, *command, *maxTurns, *deadline, *mode); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

// counts is what the run saw.
type counts struct {
	finished, failed, refusals, otherErrors atomic.Int64
}

func run(n int, command string, maxTurns int, deadline time.Duration, mode string) error {
	dir, err := os.MkdirTemp("", "talkide-overload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	// The stack runs as a process of its own, as talkide dev does: the
	// clients' ends of their connections are not its descriptors.
	stack := exec.CommandContext(ctx, os.Args[0], "-serve", dir, "-sandbox", mode,
		"-max-running-turns", strconv.Itoa(maxTurns), "-conversations", strconv.Itoa(n))
	stack.Stderr = os.Stderr
	out, err := stack.StdoutPipe()
	if err != nil {
		return err
	}
	if err := stack.Start(); err != nil {
		return err
	}
	defer func() {
		stack.Process.Signal(syscall.SIGTERM)
		stack.Wait()
	}()
	var base string
	var bound int
	if _, err := fmt.Fscanln(out, &base, &bound); err != nil {
		return fmt.Errorf("the stack did not start: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	ids := make([]string, n)
	for i := range ids {
		var c struct{ ID string }
		if err := call(ctx, client, "POST", base+"/api/conversations", map[string]string{"title": "overload " + strconv.Itoa(i)}, &c); err != nil {
			return fmt.Errorf("create conversation %d: %w", i, err)
		}
		ids[i] = c.ID
	}
	fmt.Printf("overload: %d conversations, each running %q; worker bound %d\n", n, command, bound)
	text := `[[tool:Bash {"command":` + strconv.Quote(command) + `}]]`
	var cs counts
	start := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turn(ctx, client, base, id, text, &cs)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	// The stack's log, once it has stopped.
	stack.Process.Signal(syscall.SIGTERM)
	stack.Wait()
	logb, _ := os.ReadFile(filepath.Join(dir, "stack.log"))
	log := string(logb)
	report := map[string]any{
		"conversations": n, "finished": cs.finished.Load(), "failed": cs.failed.Load(),
		"refused_then_sent_again": cs.refusals.Load(), "other_errors": cs.otherErrors.Load(),
		"seconds": took.Seconds(), "max_running_turns": bound,
		"log_leases_lost":         strings.Count(log, "session lease lost"),
		"log_events_not_recorded": strings.Count(log, "not recorded"),
		"log_too_many_open_files": strings.Count(log, "too many open files"),
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(b))
	if cs.finished.Load() != int64(n) {
		return fmt.Errorf("%d of %d turns finished", cs.finished.Load(), n)
	}
	return nil
}

// serveStack runs talkide dev's roles in dir until SIGTERM, logging to
// dir/stack.log, and prints the browser API's URL and the worker's bound.
func serveStack(dir, mode string, maxTurns, n int) error {
	logf, err := os.Create(filepath.Join(dir, "stack.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	if _, err := fdlimit.Raise(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := roles.StartDev(ctx, roles.DevConfig{
		DataDir: filepath.Join(dir, "data"), Addr: "127.0.0.1:0",
		Agent: roles.AgentConfig{Sandbox: mode, MaxRunningTurns: maxTurns},
		// Every conversation here is the one user's.
		Bounds: roles.Bounds{MaxStreamsPerUser: n + 16, MaxStreamsPerConversation: 4},
		Logger: slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return err
	}
	fmt.Println(d.Info.ControlPlane, d.Worker.Worker.MaxRunningTurns())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return d.Stop(sctx)
}

// turn sends text to conversation id until it is accepted (a worker_busy
// refusal is waited out as its Retry-After says), then follows the
// conversation's stream to the turn's end.
func turn(ctx context.Context, client *http.Client, base, id, text string, cs *counts) {
	cmid := contract.NewID("m_")
	var sent contract.SendMessageResponse
	for {
		err := call(ctx, client, "POST", base+"/api/conversations/"+id+"/messages", map[string]string{"text": text, "client_message_id": cmid}, &sent)
		var he *httpError
		switch {
		case err == nil:
		case errors.As(err, &he) && he.code == contract.CodeWorkerBusy:
			cs.refusals.Add(1)
			wait, _ := strconv.Atoi(he.retryAfter)
			select {
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
				continue
			case <-ctx.Done():
				cs.otherErrors.Add(1)
				return
			}
		default:
			cs.otherErrors.Add(1)
			fmt.Fprintln(os.Stderr, "send:", err)
			return
		}
		break
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/conversations/"+id+"/stream", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(sent.Seq-1, 10))
	resp, err := client.Do(req)
	if err != nil {
		cs.otherErrors.Add(1)
		return
	}
	defer resp.Body.Close()
	var seen bytes.Buffer
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		seen.Write(buf[:k])
		s := seen.String()
		if strings.Contains(s, `"kind":"`+contract.KindTurnFinished+`"`) {
			cs.finished.Add(1)
			return
		}
		if strings.Contains(s, `"kind":"`+contract.KindTurnFailed+`"`) {
			cs.failed.Add(1)
			return
		}
		if err != nil {
			cs.otherErrors.Add(1)
			return
		}
	}
}

type httpError struct {
	status           int
	code, retryAfter string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.code) }

// call sends in as JSON and decodes a 2xx answer into out.
func call(ctx context.Context, client *http.Client, method, url string, in, out any) error {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var e contract.Error
		json.Unmarshal(body, &e)
		return &httpError{status: resp.StatusCode, code: e.Error.Code, retryAfter: resp.Header.Get("Retry-After")}
	}
	return json.Unmarshal(body, out)
}
