package controlplane_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/poll"
)

// childLimit is the open-file limit of the control-plane under attack:
// low enough that the attack reaches it with a few thousand connections.
const childLimit = 1024

// TestStreamsNearTheFileLimit performs the stream flood against a
// control-plane whose open-file limit is 1,024: it runs in a child process
// (this test binary again) that lowers its own limit, serves on a listener
// bounded as talkide's is, and has a worker in the same process, as
// talkide dev does. The flood opens 3,000 streams of one user; the test
// then checks that every one was answered (200 within the total cap, 503
// with Retry-After beyond it), that POSTs and /healthz are still
// answered, that the control-plane survives accept(2) failing with EMFILE
// and answers once descriptors are free again, and that every slot is
// given back when the browsers leave.
func TestStreamsNearTheFileLimit(t *testing.T) {
	if os.Getenv("TALKIDE_FDLIMIT_CHILD") == "1" {
		fdLimitChild(t)
		return
	}
	if testing.Short() {
		t.Skip("the flood takes a few seconds")
	}
	var parent syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &parent); err != nil {
		t.Fatal(err)
	}
	const attempts = 3000
	if parent.Cur < attempts+1024 {
		t.Skipf("this process may open %d files; the flood needs %d", parent.Cur, attempts+1024)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStreamsNearTheFileLimit$", "-test.v")
	cmd.Env = append(os.Environ(), "TALKIDE_FDLIMIT_CHILD=1", "TALKIDE_TEST_DATABASE_URL=skip")
	cmd.Stderr = os.Stderr
	toChild, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	fromChild := bufio.NewScanner(out)
	var childOut []string
	readLine := func(prefix string) string {
		t.Helper()
		for fromChild.Scan() {
			line := fromChild.Text()
			childOut = append(childOut, line)
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return v
			}
		}
		t.Fatalf("the child ended before %q: %s", prefix, strings.Join(childOut, "\n"))
		return ""
	}
	addr := readLine("LISTENING ")
	total, _ := strconv.Atoi(readLine("TOTAL "))
	if total != controlplane.DefaultMaxStreams(childLimit) {
		t.Fatalf("the child's total cap is %d, want %d", total, controlplane.DefaultMaxStreams(childLimit))
	}

	// The flood: 3,000 streams, 200 at a time, each held open once
	// accepted.
	var (
		mu       sync.Mutex
		open     []net.Conn
		statuses = map[string]int{}
		failures []string
	)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for i := range attempts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, status, err := openRawStream(addr, fmt.Sprintf("c%d", i%4))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err.Error())
				return
			}
			statuses[status]++
			if status == "200" {
				open = append(open, c)
			} else {
				c.Close()
			}
		})
	}
	wg.Wait()
	t.Logf("%d streams against a limit of %d files: %v", attempts, childLimit, statuses)
	if len(failures) > 0 {
		t.Errorf("%d attempts got no answer, e.g. %s", len(failures), failures[0])
	}
	if statuses["200"] != total || statuses["200"]+statuses["503"] != attempts {
		t.Errorf("answers %v: want %d × 200 (the total cap) and the rest 503", statuses, total)
	}

	// Near the limit, the rest of the API still answers.
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range 20 {
		resp, err := client.Post("http://"+addr+"/api/conversations", "application/json", strings.NewReader(fmt.Sprintf(`{"id":"new%d"}`, i)))
		if err != nil {
			t.Fatalf("POST with %d streams open: %v", len(open), err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("POST with %d streams open: %d", len(open), resp.StatusCode)
		}
	}
	if resp, err := client.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz with %d streams open: %v %v", len(open), resp, err)
	}

	// accept(2) failing with EMFILE: the child takes every descriptor it
	// has left; a request sent then waits in the backlog (net/http
	// retries accept with a backoff) and is answered once the child lets
	// them go.
	fmt.Fprintln(toChild, "EXHAUST")
	readLine("EXHAUSTED")
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := client.Post("http://"+addr+"/api/conversations", "application/json", strings.NewReader(`{"id":"after-emfile"}`))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		resp.Body.Close()
		answered <- answer{status: resp.StatusCode}
	}()
	readLine("ACCEPT FAILED")
	fmt.Fprintln(toChild, "RELEASE")
	if a := <-answered; a.err != nil || a.status != http.StatusCreated {
		t.Errorf("POST sent while accept failed with EMFILE: %d %v", a.status, a.err)
	}

	for _, c := range open {
		c.Close()
	}
	toChild.Close() // the child checks that every slot is given back, then ends
	if err := cmd.Wait(); err != nil {
		t.Errorf("the child: %v\n%s", err, strings.Join(childOut, "\n"))
	}
}

// openRawStream sends a stream request on a connection of its own and
// reads the status of the answer.
func openRawStream(addr, conv string) (net.Conn, string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "GET /api/conversations/%s/stream HTTP/1.1\r\nHost: %s\r\n\r\n", conv, addr)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return nil, "", fmt.Errorf("no status line: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		c.Close()
		return nil, "", fmt.Errorf("status line %q", line)
	}
	c.SetDeadline(time.Time{})
	return c, f[1], nil
}

// fdLimitChild is the control-plane under attack.
func fdLimitChild(t *testing.T) {
	lim := syscall.Rlimit{Cur: childLimit, Max: childLimit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bounded := fdlimit.Listen(ln, fdlimit.MaxConns(childLimit))
	accepts := &acceptWatch{Listener: bounded, failed: make(chan struct{})}
	l := newEventLog(100)
	l.append(1)
	h := newHarness(t, harnessOptions{
		worker:   fakeOptions{stream: l.serve},
		streams:  controlplane.Options{MaxStreamsPerUser: 1 << 20, MaxStreamsPerConversation: 1 << 20},
		listener: accepts,
	})
	for i := range 4 {
		h.insertConversation(fmt.Sprintf("c%d", i), user, env)
	}
	fmt.Printf("LISTENING %s\nTOTAL %d\n", ln.Addr(), h.cp.StreamLimits().Total)

	in := bufio.NewScanner(os.Stdin)
	var hog []*os.File
	for in.Scan() {
		switch in.Text() {
		case "EXHAUST":
			for {
				f, err := os.Open(os.DevNull)
				if err != nil {
					break
				}
				hog = append(hog, f)
			}
			fmt.Println("EXHAUSTED")
			<-accepts.failed
			fmt.Println("ACCEPT FAILED")
		case "RELEASE":
			for _, f := range hog {
				f.Close()
			}
			hog = nil
		}
	}
	poll.Until(t, "every slot and worker stream given back", func() bool {
		return h.cp.StreamsOpen() == 0 && h.cp.StreamUpstreams() == 0
	})
	if n := bounded.Open(); n > 1 {
		t.Logf("connections still open: %d", n)
	}
}

// acceptWatch reports the first accept that failed with EMFILE.
type acceptWatch struct {
	net.Listener
	once   sync.Once
	failed chan struct{}
}

func (a *acceptWatch) Accept() (net.Conn, error) {
	c, err := a.Listener.Accept()
	if errors.Is(err, syscall.EMFILE) {
		a.once.Do(func() { close(a.failed) })
	}
	return c, err
}
