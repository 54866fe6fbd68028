// Package kubetest gives a test package one real Kubernetes API server
// (kube-apiserver and etcd, started by controller-runtime's envtest) with an
// admin, users of chosen permissions and ServiceAccount identities.
//
// The binaries come from the directory TALKIDE_KUBE_ASSETS names;
// ./scripts/test.sh builds them once (scripts/kube-apiserver.sh) and sets
// it. Without it, Start fails the test with a message that says so;
// TALKIDE_KUBE_ASSETS=skip skips instead, for machines without them. The
// server is started on first use and stopped by Main after the package's
// tests, so a package uses it like this:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
//	func TestX(t *testing.T) {
//		srv := kubetest.Start(t)
//		ns := srv.Namespace(t)
//		...
//	}
//
// It is an API server alone: no kubelet, no scheduler, no controllers (no
// garbage collection, Jobs never run, a deleted namespace stays
// Terminating). See docs/testing.md. Only tests import this package.
package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// EnvVar names the directory holding the kube-apiserver and etcd binaries,
// or "skip".
const EnvVar = "TALKIDE_KUBE_ASSETS"

// Skip is the value of EnvVar that skips the tests that need the API server.
const Skip = "skip"

// Binaries the assets directory must hold.
var binaries = []string{"kube-apiserver", "etcd"}

// ErrNoAssets is wrapped when EnvVar is unset or names no usable directory.
var ErrNoAssets = errors.New("no kube-apiserver and etcd binaries")

const (
	// The control plane starts in about 3 seconds on an idle machine; the
	// margin is for a CI machine busy with other packages' tests.
	startTimeout = 60 * time.Second
	stopTimeout  = 20 * time.Second
	// outputTail is how much of the processes' output a start failure shows.
	outputTail = 16 << 10
)

// pkg is the test binary's one server.
var pkg struct {
	mu      sync.Mutex // guards the fields below
	main    bool       // Main is running the tests
	done    bool       // Main has stopped the server; no new one starts
	started bool       // a start was tried; srv or err holds its outcome
	srv     *Server
	err     error
	// explained makes Start explain a missing EnvVar in full only once.
	explained bool
}

// Main runs the package's tests and then stops the API server, if a test
// started one. Call it from TestMain; it does not return.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// Run is Main for a TestMain with cleanup of its own after the tests: it
// returns the exit code instead of exiting.
func Run(m *testing.M) int { return run(m) }

func run(m *testing.M) int {
	// envtest logs through controller-runtime's logger, which complains on
	// stderr when nothing is set; only its errors are worth seeing.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))

	pkg.mu.Lock()
	pkg.main = true
	pkg.mu.Unlock()

	code := m.Run()

	pkg.mu.Lock()
	defer pkg.mu.Unlock()
	pkg.done = true
	if pkg.srv != nil {
		if err := pkg.srv.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubetest: stopping the API server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		pkg.srv = nil
	}
	return code
}

// Start returns the package's API server, starting it on the first call.
// It fails t when EnvVar is unset or the server cannot start, and skips t
// when EnvVar is Skip. The server is shared by all the package's tests,
// parallel ones included: each test works in namespaces and with users of
// its own (Namespace, User).
func Start(t testing.TB) *Server {
	t.Helper()
	pkg.mu.Lock()
	defer pkg.mu.Unlock()
	if !pkg.main {
		t.Fatal("kubetest.Start needs the package's TestMain to call kubetest.Main(m), which stops the API server after the tests")
	}
	if pkg.done {
		t.Fatal("kubetest.Start called after the package's tests ended")
	}
	dir, skip, err := assetsDir(os.Getenv(EnvVar))
	switch {
	case skip:
		t.Skipf("%s=%s: skipping the tests that need a Kubernetes API server", EnvVar, Skip)
	case err != nil && pkg.explained:
		t.Fatalf("%v (see the first failure)", err)
	case err != nil:
		pkg.explained = true
		t.Fatalf("%v. These tests need a real Kubernetes API server: "+
			"run ./scripts/test.sh, which builds one once and sets %s, "+
			"or %s=$(./scripts/kube-apiserver.sh) go test ... "+
			"Without it, %s=%s skips them. See docs/testing.md.", err, EnvVar, EnvVar, EnvVar, Skip)
	}
	if !pkg.started {
		pkg.started = true
		pkg.srv, pkg.err = start(dir)
	}
	if pkg.err != nil {
		t.Fatalf("kubetest: %v", pkg.err)
	}
	return pkg.srv
}

// assetsDir checks the value of EnvVar: the directory it names, or skip.
func assetsDir(v string) (dir string, skip bool, err error) {
	switch v {
	case "":
		return "", false, fmt.Errorf("%w: %s is not set", ErrNoAssets, EnvVar)
	case Skip:
		return "", true, nil
	}
	if !filepath.IsAbs(v) {
		// The tests run in their package's directory, not where go test
		// was typed.
		return "", false, fmt.Errorf("%w: %s=%q is not an absolute path", ErrNoAssets, EnvVar, v)
	}
	for _, name := range binaries {
		p := filepath.Join(v, name)
		fi, err := os.Stat(p)
		if err != nil {
			return "", false, fmt.Errorf("%w: %s=%s: %w", ErrNoAssets, EnvVar, v, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", false, fmt.Errorf("%w: %s=%s: %s is not an executable file", ErrNoAssets, EnvVar, v, p)
		}
	}
	return v, false, nil
}

// Server is a running API server. Its methods may be called from parallel
// tests.
type Server struct {
	env *envtest.Environment
	// admin belongs to the group system:masters, which RBAC lets do
	// anything; handed out only as copies.
	admin *rest.Config
	tmp   string // etcd's data and the certificates
	out   *tail  // the processes' output
}

// start starts kube-apiserver and etcd from dir.
func start(dir string) (*Server, error) {
	// One directory for etcd's data and the API server's certificates,
	// removed whole: envtest's own temporary directories are not all
	// removed when a start fails.
	tmp, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	out := &tail{max: outputTail}
	no := false
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			// Explicit paths: envtest would otherwise let KUBEBUILDER_ASSETS
			// or TEST_ASSET_* from the developer's shell pick other binaries.
			APIServer: &envtest.APIServer{Path: filepath.Join(dir, "kube-apiserver"), CertDir: filepath.Join(tmp, "apiserver"), Out: out, Err: out},
			Etcd:      &envtest.Etcd{Path: filepath.Join(dir, "etcd"), DataDir: filepath.Join(tmp, "etcd"), Out: out, Err: out},
		},
		// Never a developer's real cluster, whatever USE_EXISTING_CLUSTER says.
		UseExistingCluster:       &no,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	for _, d := range []string{env.ControlPlane.APIServer.CertDir, env.ControlPlane.Etcd.DataDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
		}
	}
	srv := &Server{env: env, tmp: tmp, out: out}
	cfg, err := env.Start()
	if err != nil {
		// A half-started plane keeps running unless stopped.
		return nil, errors.Join(fmt.Errorf("starting kube-apiserver and etcd from %s: %w; their last output:\n%s", dir, err, out.String()), srv.stop())
	}
	srv.admin = cfg
	return srv, nil
}

// stop stops the processes and removes their files.
func (s *Server) stop() error {
	err := s.env.Stop()
	return errors.Join(err, os.RemoveAll(s.tmp))
}

// Config returns a new copy of a config for an administrator (the group
// system:masters): RBAC allows it everything, impersonation included.
func (s *Server) Config() *rest.Config { return rest.CopyConfig(s.admin) }

// Client returns a clientset for the administrator.
func (s *Server) Client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	return NewClient(t, s.Config())
}

// Host returns the API server's https URL; it listens on 127.0.0.1.
func (s *Server) Host() string { return s.admin.Host }

// NewClient returns a clientset for cfg, failing t on a bad config.
func NewClient(t testing.TB, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubernetes.NewForConfig: %v", err)
	}
	return cs
}

// tail keeps the last max bytes written to it. os/exec copies each
// process's output from a goroutine of its own.
type tail struct {
	mu  sync.Mutex // guards buf
	buf []byte
	max int
}

var _ io.Writer = (*tail)(nil)

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.buf))
}
