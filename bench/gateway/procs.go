package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/sqlite"
)

// The modes measured against nginx run each proxy as a process of its own,
// in front of the same simulator, so that its CPU is read from /proc the
// same way for both and the client's and the simulator's are not in it:
//
//   - nginx: Debian's nginx-light as a pure reverse proxy (proxy_buffering
//     off, keep-alive connections to the upstream, its access log on);
//   - cp-nolimit, cp-limit: the talkide binary's `controlplane` as an
//     operator starts it, with its production defaults: the store (its
//     own SQLite file, or a schema of its own on PostgreSQL), the budget
//     service, Prometheus metrics, the JSON log line per call on stderr
//     (to a file); WorkerTokens minted at its mint endpoint with an
//     identity token, cached as the worker's minting cache does;
//   - cp-nolimit-base, cp-limit-base: the same through the control-plane
//     of a second binary (-talkide-base), in the same rounds.

// procModes are the modes that need the processes.
var procModes = map[string]bool{
	"nginx": true, "cp-nolimit": true, "cp-limit": true, "go-floor": true,
	"cp-nolimit" + baseSuffix: true, "cp-limit" + baseSuffix: true,
}

// baseSuffix names the cp modes through the control-plane of the second
// binary (-talkide-base): two builds measured in the same rounds, so that
// the change between them is not lost in what the machine does between
// two runs.
const baseSuffix = "-base"

// procStack is the processes of one database's run.
type procStack struct {
	cps      map[string]*controlPlane // by variant: "" and baseSuffix
	nginxURL string
	nginx    *exec.Cmd
	floor    *exec.Cmd // the floor proxy (floor.go)
	floorURL string
	convs    map[string]string // conversation id by user, the same in every control-plane
	closers  []func() error
}

// controlPlane is a running talkide controlplane.
type controlPlane struct {
	url    string
	cmd    *exec.Cmd
	minter *minting.Minter
}

// procConfig is what startProcs needs.
type procConfig struct {
	simURL string
	tmpDir string
	nginx  bool       // start nginx
	cps    []cpConfig // the control-planes to start
	floor  bool       // start the floor proxy
	cpus   []int      // the CPUs they run on; nil: this process's
}

// cpConfig is a control-plane to start.
type cpConfig struct {
	variant  string // "", or baseSuffix for the second binary's
	bin      string // the talkide binary; "" builds it from this tree
	database string // "sqlite", or a postgres:// DSN with a schema of its own
}

func startProcs(ctx context.Context, cfg procConfig) (_ *procStack, err error) {
	p := &procStack{cps: map[string]*controlPlane{}, convs: map[string]string{}}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if cfg.nginx {
		if err := p.startNginx(ctx, cfg); err != nil {
			return nil, fmt.Errorf("nginx: %w", err)
		}
	}
	if cfg.floor {
		if err := p.startFloor(cfg); err != nil {
			return nil, fmt.Errorf("floor proxy: %w", err)
		}
	}
	for _, cp := range cfg.cps {
		if cp.bin == "" {
			if cp.bin, err = buildTalkide(ctx, cfg.tmpDir); err != nil {
				return nil, fmt.Errorf("talkide controlplane: %w", err)
			}
		}
		if err := p.startControlPlane(ctx, cfg, cp); err != nil {
			return nil, fmt.Errorf("talkide controlplane (%s): %w", cp.bin, err)
		}
	}
	return p, nil
}

func (p *procStack) close() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startSelf runs bin (this binary when "") as `bin sub ADDR args…` on a
// free loopback port, with its output to the file out, and waits until it
// answers at its URL. It returns the URL, the command and the function
// that stops it, which the caller keeps: it is called here only when the
// process did not come up.
func startSelf(bin, out string, cpus []int, sub string, args ...string) (string, *exec.Cmd, func() error, error) {
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return "", nil, nil, err
		}
		bin = self
	}
	port, err := freePort()
	if err != nil {
		return "", nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, append([]string{sub, addr}, args...)...)
	exited, stop, err := startProc(cmd, out, 10*time.Second, cpus)
	if err != nil {
		return "", nil, nil, err
	}
	url := "http://" + addr
	if err := waitHTTP(context.Background(), url+"/", exited); err != nil {
		stop()
		return "", nil, nil, err
	}
	return url, cmd, stop, nil
}

// startProc starts cmd with its output to the file out, and returns a
// channel closed when it has exited and the function that stops it:
// SIGINT, then SIGKILL after grace. With cpus, the process runs on those
// CPUs alone; without, on this process's.
func startProc(cmd *exec.Cmd, out string, grace time.Duration, cpus []int) (<-chan struct{}, func() error, error) {
	log, err := os.Create(out)
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	start := cmd.Start
	if cpus != nil {
		start = func() error { return startOn(cmd, cpus) }
	}
	if err := start(); err != nil {
		log.Close()
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	stop := func() error {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("%s did not stop within %v", filepath.Base(cmd.Path), grace)
		}
	}
	return exited, stop, nil
}

// waitHTTP waits until url answers at all (any status).
func waitHTTP(ctx context.Context, url string, exited <-chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("it exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no answer within a minute: %w", url, err)
		}
	}
}

// nginxBin finds nginx, installing Debian's nginx-light when it is
// missing and this process may (root with apt-get).
func nginxBin(ctx context.Context) (string, error) {
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	if os.Geteuid() != 0 {
		return "", errors.New("nginx is not installed: apt-get install nginx-light (as root), or leave out the nginx mode")
	}
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "nginx-light")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get install nginx-light: %w\n%s", err, out)
		}
		return nil
	}
	if err := install(); err != nil {
		if out, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %w\n%s", uerr, out)
		}
		if err := install(); err != nil {
			return "", err
		}
	}
	return exec.LookPath("/usr/sbin/nginx")
}

// nginxConf is a pure reverse proxy to the simulator: no buffering of the
// response (each event goes on as it comes), the request body buffered in
// memory (as the gateway buffers it), keep-alive connections both ways,
// the default access log line per request, to a file. Its workers are
// as many as the CPUs it may run on: what auto gives on a machine where
// nothing is confined, and not two workers on one CPU in a layout of
// -upstream-cpu or -proxy-cpu (nginx 1.22's auto counts the machine's
// CPUs, not its own).
const nginxConf = `worker_processes %[5]s;
daemon off;
master_process on;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
%[4]s
events { worker_connections 8192; }
http {
    access_log %[1]s/nginx-access.log;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    client_max_body_size 32m;
    client_body_buffer_size 1m;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    upstream simulator {
        server %[2]s;
        keepalive 1024;
        keepalive_requests 1000000;
        keepalive_timeout 600s;
    }
    server {
        listen 127.0.0.1:%[3]d;
        location / {
            proxy_pass http://simulator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering on;
        }
    }
}
`

func (p *procStack) startNginx(ctx context.Context, cfg procConfig) error {
	bin, err := nginxBin(ctx)
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.tmpDir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	up := strings.TrimPrefix(cfg.simURL, "http://")
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // its workers can write the files in dir
	}
	workers := "auto"
	if cfg.cpus != nil {
		workers = strconv.Itoa(len(cfg.cpus))
	} else if cpus, err := allowedCPUs(); err == nil {
		workers = strconv.Itoa(len(cpus))
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, up, port, user, workers), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "nginx-error.log"))
	exited, stop, err := startProc(cmd, filepath.Join(dir, "stderr"), 10*time.Second, cfg.cpus)
	if err != nil {
		return err
	}
	p.nginx = cmd
	p.closers = append(p.closers, stop)
	p.nginxURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHTTP(ctx, p.nginxURL+"/", exited); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "nginx-error.log"))
		return fmt.Errorf("%w\n%s", err, b)
	}
	return nil
}

// buildTalkide builds the talkide binary into dir, with go build's flags
// added (none for a benchmark: the binary as users run it).
func buildTalkide(ctx context.Context, dir string, flags ...string) (string, error) {
	out := filepath.Join(dir, "talkide")
	return out, goBuild(ctx, out, "github.com/talkide/platform/cmd/talkide", flags...)
}

// goBuild builds the package pkg into the file out, with go build's flags
// added.
func goBuild(ctx context.Context, out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	if b, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// startControlPlane starts the control-plane cp.
func (p *procStack) startControlPlane(ctx context.Context, cfg procConfig, cp cpConfig) error {
	dir := filepath.Join(cfg.tmpDir, "controlplane"+cp.variant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	identity, err := p.seedControlPlane(ctx, cp.database, dir)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	args := []string{"controlplane", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dir,
		"--anthropic-url", cfg.simURL, "--log-format", "json"}
	if cp.database != "sqlite" {
		args = append(args, "--database", cp.database)
	}
	cmd := exec.Command(cp.bin, args...)
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY="+apiKey)
	// Its log, the line per call included, goes where an operator's
	// would: a file.
	exited, stop, err := startProc(cmd, filepath.Join(dir, "controlplane.log"), 30*time.Second, cfg.cpus)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, stop)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHTTP(ctx, url+"/healthz", exited); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "controlplane.log"))
		return fmt.Errorf("%w\n%s", err, b)
	}
	p.cps[cp.variant] = &controlPlane{url: url, cmd: cmd, minter: minting.New(url, func() (string, error) { return identity, nil }, nil)}
	return nil
}

// seedControlPlane creates, in the control-plane's store before it
// starts, the tenant-env, the two users with a conversation each, the
// limited user's limit and an identity token, which it returns.
func (p *procStack) seedControlPlane(ctx context.Context, database, dir string) (string, error) {
	var st store.Store
	var err error
	if database == "sqlite" {
		st, err = sqlite.Open(ctx, filepath.Join(dir, "controlplane.db"), nil)
	} else {
		st, err = postgres.Open(ctx, database, nil)
	}
	if err != nil {
		return "", err
	}
	defer st.Close()
	now := time.Now()
	if _, err := provision.EnsureEnv(ctx, st, benchTenant, benchEnv, ""); err != nil {
		return "", err
	}
	for _, u := range []string{freeUser, limitedUser} {
		if err := st.PutUser(ctx, store.User{ID: u, Name: u, CreatedAt: now}); err != nil {
			return "", err
		}
		c := store.Conversation{ID: "conv-" + u, Tenant: benchTenant, Env: benchEnv, UserID: u, Title: "benchmark", CreatedAt: now}
		if _, _, err := st.CreateConversation(ctx, c); err != nil {
			return "", err
		}
		p.convs[u] = c.ID
	}
	bst, ok := st.(budget.Store)
	if !ok {
		return "", fmt.Errorf("the store %T keeps no budgets", st)
	}
	svc := budget.New(bst, budget.DefaultPrices(), nil)
	err = svc.SetLimit(ctx, budget.Limit{Subject: budget.User(limitedUser), Kind: budget.SpendPerDay, Max: int64(limitMax)})
	svc.Close(ctx)
	if err != nil {
		return "", err
	}
	tok, _, err := provision.IssueIdentityToken(ctx, st, benchTenant, benchEnv, 0, now)
	return tok, err
}

// mode sets up m, one of procModes.
func (p *procStack) mode(m *mode, k string) error {
	switch k {
	case "nginx":
		if p.nginxURL == "" {
			return errors.New("nginx is not running")
		}
		m.url = p.nginxURL + "/v1/messages"
		m.header = directHeader
		m.proc = func() []int { return tree(p.nginx.Process.Pid) }
	case "go-floor":
		if p.floorURL == "" {
			return errors.New("the floor proxy is not running")
		}
		m.url = p.floorURL + "/v1/messages"
		m.header = directHeader
		m.proc = func() []int { return []int{p.floor.Process.Pid} }
	default: // cp-nolimit, cp-limit, and either with baseSuffix
		name, _ := strings.CutSuffix(k, baseSuffix)
		cp := p.cps[k[len(name):]] // by the suffix: "" or baseSuffix
		if cp == nil {
			return fmt.Errorf("mode %s: its control-plane is not running (-talkide-base names the second binary)", k)
		}
		user := freeUser
		if name == "cp-limit" {
			user = limitedUser
		}
		conv := p.convs[user]
		m.url = cp.url + contract.GatewayPrefix + "/v1/messages"
		m.header = func() http.Header {
			// The worker's minting cache: a new token when the last is
			// near its end, from the mint endpoint.
			tok, err := cp.minter.Token(context.Background(), conv)
			if err != nil {
				tok = "mint-failed-" + err.Error()
			}
			return http.Header{
				"X-Worker-Token":            {tok},
				contract.ConversationHeader: {conv},
				"Anthropic-Version":         {"2023-06-01"},
				"Content-Type":              {"application/json"},
			}
		}
		m.proc = func() []int { return []int{cp.cmd.Process.Pid} }
	}
	return nil
}

// tree returns pid and its children.
func tree(pid int) []int {
	pids := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(c); ok && st.ppid == pid {
			pids = append(pids, c)
		}
	}
	return pids
}

// taskCPU returns the CPU time of every thread of pids, by thread id, in
// nanoseconds (/proc/PID/task/TID/schedstat: time on a CPU).
func taskCPU(pids []int) map[int]int64 {
	out := map[int]int64{}
	for _, pid := range pids {
		base := filepath.Join("/proc", strconv.Itoa(pid), "task")
		ents, err := os.ReadDir(base)
		if err != nil {
			continue
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(base, e.Name(), "schedstat"))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				continue
			}
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			out[tid] = ns
		}
	}
	return out
}

// taskDelta is the CPU time used between two readings by the threads
// alive at the second (all of it, for a thread started since).
func taskDelta(before, after map[int]int64) time.Duration {
	var ns int64
	for tid, t := range after {
		ns += max(0, t-before[tid])
	}
	return time.Duration(ns)
}

// writersWait is longer than the control-plane's background writers wait
// for company before they write a batch that is not full (200 ms for
// settlements and usage records): the process is idle meanwhile, and its
// CPU would look settled before the phase's last batch is written.
const writersWait = 250 * time.Millisecond

// quiesce waits until the processes' CPU stops moving (their background
// writes after a phase: settlements, usage records, log lines), at most a
// second after writersWait, so that a phase is charged its own work and
// none of the phase before.
func quiesce(pids func() []int) map[int]int64 {
	time.Sleep(writersWait)
	last := taskCPU(pids())
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		now := taskCPU(pids())
		if taskDelta(last, now) < 200*time.Microsecond {
			return now
		}
		last = now
	}
	return last
}
