package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/trust"
)

// apiKey is the simulator's key, which only the gateway and the direct
// client hold.
const apiKey = "sk-ant-api03-bench-gateway-0123456789"

// Who the benchmark's calls are for.
const (
	benchTenant = "bench"
	benchEnv    = "prod"
	// freeUser has no limit: Reserve admits without touching the store.
	freeUser = "bench-free"
	// limitedUser has a spending limit far above what the run spends: every
	// call goes through a real admission in the database and is never
	// refused.
	limitedUser = "bench-limited"
)

// limitMax is the limited user's daily spending limit: never reached.
const limitMax = 1_000_000 * budget.Dollar

// stack is one database's set-up: the simulator, and the control-plane
// started as talkide controlplane starts it (internal/roles), its store
// timed; beside it, gateways on the same store configured otherwise, for
// comparison; each on a loopback listener of its own.
type stack struct {
	kind     string // "sqlite" or "postgres"
	where    string // the file, or user@host:port/db and schema
	pgPool   int    // PostgreSQL: the pool's connections
	cp       *roles.ControlPlane
	st       store.Store // the control-plane's, timed
	svc      *budget.Service
	keys     *trust.Keyring
	simURL   string                      // base URL of the simulator
	gateways map[string]string           // base URLs of the gateways, with gateway.Prefix, by variant
	gws      map[string]*gateway.Gateway // the gateways, by variant
	convs    map[string]store.Conversation
	postgres string     // the server's DSN, to find its processes; "" for SQLite
	trace    *tracer    // legs of each request, store calls, upstream connections
	procs    *procStack // nginx and the control-plane process; nil when no mode needs them

	tokensMu sync.Mutex
	tokens   map[string]token // guarded by tokensMu; by conversation id

	closers []func() error // run in reverse by close
}

type token struct {
	tok    string
	minted time.Time
}

// stackConfig is what startStack needs.
type stackConfig struct {
	database   string // "sqlite" or a postgres:// URL
	deltaDelay time.Duration
	gatewayLog bool // log the gateway's lines as JSON (to io.Discard)
	tmpDir     string
	modes      []string
	talkide    string // the talkide binary for the cp modes; "" builds it
	base       string // the talkide binary for the cp modes with baseSuffix
	simApart   bool   // the simulator in a process of its own (simBin; "": this binary)
	simBin     string
	simCPUs    []int // the CPUs the simulator apart runs on; nil: this process's
	proxyCPUs  []int // the CPUs every proxy runs on; nil: this process's
}

// startStack starts everything for one database.
func startStack(ctx context.Context, cfg stackConfig) (_ *stack, err error) {
	s := &stack{tokens: map[string]token{}, convs: map[string]store.Conversation{}, trace: newTracer()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	cpc := roles.ControlPlaneConfig{Listen: "127.0.0.1:0", SecretsPath: roles.ControlPlaneDir(cfg.tmpDir).Secrets(),
		APIKey: apiKey, Tenant: benchTenant, Env: benchEnv}
	switch {
	case cfg.database == "sqlite":
		s.kind = "sqlite"
		s.where = filepath.Join(cfg.tmpDir, "cp.db")
		cpc.DBPath = s.where
	case strings.HasPrefix(cfg.database, "postgres://") || strings.HasPrefix(cfg.database, "postgresql://"):
		s.kind = "postgres"
		dsn, schema, drop, err := newSchema(ctx, cfg.database)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, drop)
		cpc.Database = dsn
		s.postgres = cfg.database
		u, _ := url.Parse(cfg.database)
		s.where = fmt.Sprintf("%s%s, schema %s", u.Host, u.Path, schema)
		if pc, err := pgxPoolSize(dsn); err == nil {
			s.pgPool = pc
		}
	default:
		return nil, fmt.Errorf("-database %q: want sqlite or a postgres:// URL", cfg.database)
	}

	if cfg.simApart {
		if s.simURL, err = s.startSim(cfg); err != nil {
			return nil, fmt.Errorf("simulator: %w", err)
		}
	} else if s.simURL, err = s.serve(s.trace.wrap(newSim(cfg.deltaDelay)), s.trace.connState); err != nil {
		return nil, err
	}
	cpc.Upstream = s.simURL

	cpc.Logger = slog.New(slog.DiscardHandler)
	if cfg.gatewayLog {
		// What production pays for its log lines, but for the write.
		cpc.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	cpc.WrapStore = func(st store.Store) store.Store {
		bst, ok := st.(budget.Store)
		if !ok {
			return st // which StartControlPlane refuses
		}
		return &timedStore{appStore: st, budgetStore: bst, t: s.trace}
	}
	if s.cp, err = roles.StartControlPlane(ctx, cpc); err != nil {
		return nil, err
	}
	// Last (closers run in reverse): the comparison gateways below use
	// its store and budget service.
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return s.cp.Stop(ctx)
	})
	s.st, s.svc, s.keys = s.cp.Store, s.cp.Budget, s.cp.Secrets.Tokens()

	up, err := url.Parse(s.simURL)
	if err != nil {
		return nil, err
	}
	// The control-plane's own gateway, on its listener ("budget"); beside
	// it, on listeners of their own, the same without a budget service
	// (the gateway before budgets), and both as they were before the
	// changes this benchmark led to ("-before": no conversation cache,
	// http.DefaultTransport's two idle upstream connections per host).
	s.gateways = map[string]string{"budget": s.cp.HTTP.URL() + gateway.Prefix}
	s.gws = map[string]*gateway.Gateway{"budget": s.cp.Gateway}
	for _, v := range []string{"nobudget", "budget-before", "nobudget-before"} {
		opts := gateway.Options{Logger: cpc.Logger.With("component", "gateway"), Budget: s.svc}
		if strings.HasPrefix(v, "nobudget") {
			opts.Budget = nil
		}
		if strings.HasSuffix(v, "-before") {
			opts.ConversationTTL = -1
			opts.Transport = http.DefaultTransport.(*http.Transport).Clone()
		}
		gw := gateway.New(up, apiKey, s.keys, s.st, &opts)
		s.gws[v] = gw
		// After its server has shut down (closers run in reverse), before
		// the control-plane stops: its last usage records.
		s.closers = append(s.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return gw.Close(ctx)
		})
		mux := http.NewServeMux()
		mux.Handle(gateway.Prefix+"/", gw)
		base, err := s.serve(mux, nil)
		if err != nil {
			return nil, err
		}
		s.gateways[v] = base + gateway.Prefix
	}

	if err := s.seed(ctx); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}

	pc := procConfig{simURL: s.simURL, tmpDir: cfg.tmpDir, cpus: cfg.proxyCPUs}
	cps := map[string]string{} // the control-planes' binaries by variant
	for _, m := range cfg.modes {
		pc.nginx = pc.nginx || m == "nginx"
		switch {
		case strings.HasPrefix(m, "cp-") && strings.HasSuffix(m, baseSuffix):
			if cfg.base == "" {
				return nil, fmt.Errorf("mode %s needs -talkide-base", m)
			}
			cps[baseSuffix] = cfg.base
		case strings.HasPrefix(m, "cp-"):
			cps[""] = cfg.talkide
		}
		pc.floor = pc.floor || m == "go-floor"
	}
	for variant, bin := range cps {
		cp := cpConfig{variant: variant, bin: bin, database: "sqlite"}
		if s.kind == "postgres" {
			// A schema of its own, as it has a SQLite file of its own.
			dsn, _, drop, err := newSchema(ctx, cfg.database)
			if err != nil {
				return nil, err
			}
			s.closers = append(s.closers, drop)
			cp.database = dsn
		}
		pc.cps = append(pc.cps, cp)
	}
	if pc.nginx || len(pc.cps) > 0 || pc.floor {
		if s.procs, err = startProcs(ctx, pc); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.procs.close)
	}
	return s, nil
}

// serve serves h on a loopback port until close.
func (s *stack) serve(h http.Handler, connState func(net.Conn, http.ConnState)) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: connState}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		<-done
		return err
	})
	return "http://" + ln.Addr().String(), nil
}

// seed creates the tenant-env, the two users with a conversation each, and
// the limited user's limit.
func (s *stack) seed(ctx context.Context) error {
	now := time.Now()
	if err := s.st.PutEnv(ctx, store.Env{Tenant: benchTenant, Name: benchEnv, WorkerURL: "http://127.0.0.1:1", CreatedAt: now}); err != nil {
		return err
	}
	for _, u := range []string{freeUser, limitedUser} {
		if err := s.st.PutUser(ctx, store.User{ID: u, Name: u, CreatedAt: now}); err != nil {
			return err
		}
		c := store.Conversation{ID: "conv-" + u, Tenant: benchTenant, Env: benchEnv, UserID: u, Title: "benchmark", CreatedAt: now}
		if _, _, err := s.st.CreateConversation(ctx, c); err != nil {
			return err
		}
		s.convs[u] = c
	}
	return s.svc.SetLimit(ctx, budget.Limit{Subject: budget.User(limitedUser), Kind: budget.SpendPerDay, Max: int64(limitMax)})
}

// token returns a WorkerToken for user's conversation, minted again when
// half its lifetime has passed, as the worker's minting cache does.
func (s *stack) token(user string) string {
	c := s.convs[user]
	now := time.Now()
	s.tokensMu.Lock()
	defer s.tokensMu.Unlock()
	t, ok := s.tokens[c.ID]
	if !ok || now.Sub(t.minted) > trust.WorkerTokenTTL/2 {
		tok, _ := s.keys.MintWorkerToken(c.Tenant, c.Env, c.ID, now)
		t = token{tok: tok, minted: now}
		s.tokens[c.ID] = t
	}
	return t.tok
}

// close stops everything, in reverse order of start.
func (s *stack) close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// newSchema creates a schema of its own for the run in the database of
// base, and returns a DSN whose search_path is that schema and a function
// that drops it.
func newSchema(ctx context.Context, base string) (dsn, schema string, drop func() error, err error) {
	var b [6]byte
	rand.Read(b[:])
	schema = "talkide_bench_" + hex.EncodeToString(b[:])
	if err := execOnce(ctx, base, `CREATE SCHEMA `+schema); err != nil {
		return "", "", nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return execOnce(ctx, base, `DROP SCHEMA `+schema+` CASCADE`)
	}
	return u.String(), schema, drop, nil
}

// execOnce runs one statement on a connection of its own.
func execOnce(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("postgres: %s: %w", sql, err)
	}
	return nil
}

// pgxPoolSize is the pool size the store gets from dsn: pool_max_conns, or
// the store's default.
func pgxPoolSize(dsn string) (int, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return 0, err
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		return postgres.DefaultMaxConns, nil
	}
	return int(cfg.MaxConns), nil
}
