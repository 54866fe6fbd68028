// Package provision sets up tenant-envs on the control-plane side: the env
// row, identity tokens (stored hashed, shown once) and the worker's Secret.
//
// It works on a store.Store and the control-plane's master command secret;
// `talkide admin` and `talkide dev` are its callers.
package provision

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/talkide/platform/internal/store"
)

// Sentinel errors callers branch on.
var (
	// ErrInvalidName is wrapped when a tenant or env name is not usable.
	ErrInvalidName = errors.New("invalid tenant or env name")
	// ErrNamespaceTaken is wrapped when another tenant-env already maps to
	// the same Kubernetes namespace ("a-b"/"c" and "a"/"b-c" both make
	// "a-b-c").
	ErrNamespaceTaken = errors.New("namespace already used by another tenant-env")
)

// maxNamespaceLen is the longest Kubernetes namespace (a DNS-1123 label).
const maxNamespaceLen = 63

// Namespace is the Kubernetes namespace of a tenant-env's worker.
func Namespace(tenant, env string) string { return tenant + "-" + env }

// ValidateNames checks that tenant and env make a usable tenant-env: each a
// DNS-1123 label (lowercase letters, digits and '-', starting and ending with
// a letter or digit), together a namespace of at most 63 characters that is
// not one Kubernetes or the platform reserves (kube-*, default, talkide-*).
// The same names appear in request signatures and WorkerTokens, which this
// alphabet keeps unambiguous.
func ValidateNames(tenant, env string) error {
	for _, n := range [...]struct{ kind, name string }{{"tenant", tenant}, {"env", env}} {
		if err := validateLabel(n.name); err != nil {
			return fmt.Errorf("%w: %s %q %s", ErrInvalidName, n.kind, n.name, err)
		}
	}
	ns := Namespace(tenant, env)
	if len(ns) > maxNamespaceLen {
		return fmt.Errorf("%w: namespace %q is longer than %d characters", ErrInvalidName, ns, maxNamespaceLen)
	}
	if tenant == "kube" || tenant == "talkide" || ns == "default" {
		return fmt.Errorf("%w: tenant %q is reserved", ErrInvalidName, tenant)
	}
	return nil
}

func validateLabel(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return errors.New("may contain only lowercase letters, digits and '-' (not first or last)")
		}
	}
	return nil
}

// validateWorkerURL accepts an absolute http or https URL without
// credentials, query or fragment.
func validateWorkerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("worker URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("worker URL %q: want http(s)://host[:port][/path] without credentials, query or fragment", s)
	}
	return nil
}

// EnsureEnv creates the tenant (if needed) and the env, or sets an existing
// env's worker URL, and returns the stored env. An empty workerURL records
// that no worker is known yet (commands to the env fail until one is set).
// An existing env keeps its CreatedAt. It refuses names ValidateNames
// refuses and a namespace another tenant-env already maps to.
func EnsureEnv(ctx context.Context, st store.Store, tenant, env, workerURL string) (store.Env, error) {
	if err := ValidateNames(tenant, env); err != nil {
		return store.Env{}, err
	}
	if workerURL != "" {
		if err := validateWorkerURL(workerURL); err != nil {
			return store.Env{}, err
		}
		workerURL = strings.TrimRight(workerURL, "/")
	}
	envs, err := st.ListEnvs(ctx)
	if err != nil {
		return store.Env{}, fmt.Errorf("provision: %w", err)
	}
	ns := Namespace(tenant, env)
	for _, e := range envs {
		if (e.Tenant != tenant || e.Name != env) && Namespace(e.Tenant, e.Name) == ns {
			return store.Env{}, fmt.Errorf("%w: %s/%s and %s/%s are both namespace %s", ErrNamespaceTaken, e.Tenant, e.Name, tenant, env, ns)
		}
	}
	if err := st.PutEnv(ctx, store.Env{Tenant: tenant, Name: env, WorkerURL: workerURL, CreatedAt: time.Now().UTC()}); err != nil {
		return store.Env{}, fmt.Errorf("provision: %w", err)
	}
	e, err := st.GetEnv(ctx, tenant, env)
	if err != nil {
		return store.Env{}, fmt.Errorf("provision: %w", err)
	}
	return e, nil
}
