// Package kubeprovision provisions the worker of each tenant-env on
// Kubernetes: it server-side-applies the namespace and everything in it
// (ServiceAccount, Role and binding, token Secret, session volume claim,
// Deployment, Service, NetworkPolicy) from the store's tenant-envs, repairs
// drift, rotates identity tokens, and retires envs.
//
// It is the control-plane side's only Kubernetes client. The store is the
// source of truth; the cluster is made to match it (docs/kubernetes.md).
package kubeprovision

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// FieldManager is the one field manager every apply uses, so the
// managedFields of an object show who owns what: a field another manager
// changes is taken back (Force) on the next sync.
const FieldManager = "talkide-control-plane"

// Names of the objects in every tenant-env namespace.
const (
	WorkerName    = "talkide-worker"  // ServiceAccount, Role, RoleBinding, Deployment, Service, NetworkPolicy
	SessionsClaim = "claude-sessions" // the RWX claim mounted at SessionsMount
	SecretName    = provision.SecretName
)

// Where the worker's pod mounts things.
const (
	SessionsMount = "/data/claude"
	SecretMount   = "/var/run/talkide/worker"
)

// Labels. Every object the provisioner owns carries ManagedByLabel, which
// its watches select on, and the tenant and env labels, which map an event
// back to the tenant-env to reconcile.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = FieldManager
	NameLabel      = "app.kubernetes.io/name"
	PartOfLabel    = "app.kubernetes.io/part-of"
	LabelTenant    = provision.LabelTenant
	LabelEnv       = provision.LabelEnv
)

// ManagedSelector selects the objects the provisioner owns.
const ManagedSelector = ManagedByLabel + "=" + ManagedByValue

// Sentinel errors.
var (
	// ErrRetired is returned by Sync for an env that was retired (talkide
	// admin env delete); adding the env again makes it live.
	ErrRetired = errors.New("tenant-env is retired")
	// ErrConflict is wrapped when the token Secret changed between reading
	// it and writing a rotated token: someone else rotated at the same
	// time. The token issued here is revoked; sync again.
	ErrConflict = errors.New("token Secret changed during the rotation")
)

// EgressPeer is one destination the worker may reach besides the
// control-plane and DNS: a CIDR, optionally limited to TCP ports.
type EgressPeer struct {
	CIDR  string
	Ports []int32
}

// Options configure a Provisioner. The zero value of each field is its
// default.
type Options struct {
	// CommandKeys, when set, holds the master command secrets by key id
	// (the control-plane's, reloaded when its secrets file changes): each
	// sync writes the newest one's derived key into the worker's Secret.
	CommandKeys *trust.Keyring
	// Image is the worker's container image (required in practice: the
	// default names an image that is only right for a cluster that pulls
	// from a registry holding it).
	Image string
	// ControlPlaneURL is the control-plane as workers reach it
	// (TALKIDE_GATEWAY_BASE_URL). Default
	// http://talkide-controlplane.talkide.svc.cluster.local:7878.
	ControlPlaneURL string
	// ControlPlaneNamespace is where the control-plane runs: the only
	// namespace the worker accepts commands from and sends to. Default
	// "talkide".
	ControlPlaneNamespace string
	// ControlPlanePort is the control-plane's port the worker may reach.
	// Default 7878.
	ControlPlanePort int32
	// WorkerPort is the worker's command port. Default 8080.
	WorkerPort int32
	// StorageClass of the session claim; "" leaves it to the cluster's
	// default class (which must offer ReadWriteMany).
	StorageClass string
	// SessionsSize is the claim's size. Default 10Gi.
	SessionsSize resource.Quantity
	// Requests and Limits of the worker container; defaults 250m/512Mi and
	// 2/2Gi.
	CPURequest, MemoryRequest, CPULimit, MemoryLimit resource.Quantity
	// EgressAllow are further destinations the worker may reach (the
	// egress allow-list: package mirrors, git hosts). The Kubernetes API
	// server, which the worker needs for builds, is one of them.
	EgressAllow []EgressPeer
	// WorkerArgs are extra arguments for `talkide worker` (e.g.
	// --harness claude-code).
	WorkerArgs []string
	// TokenTTL is the lifetime of identity tokens it issues. Default
	// provision.DefaultTokenTTL.
	TokenTTL time.Duration
	// RotateBefore is the lead time: a token that expires within it is
	// rotated by the next sync. Default 7 days.
	RotateBefore time.Duration
	// Grace is how long a rotated-out token stays valid: longer than a
	// mounted Secret takes to reach the pod (the kubelet's sync period plus
	// its cache TTL, about two minutes by default). Default 10 minutes.
	Grace time.Duration
	// Resync is how often the reconciler syncs every env even without an
	// event. Default 5 minutes.
	Resync time.Duration
	// EnvPoll is how often the reconciler looks for envs the store has and
	// it has not synced (talkide admin env add writes only the store):
	// each found is synced at once. Default 10 seconds.
	EnvPoll time.Duration
	// Workers is how many envs the reconciler syncs at once. Default 2.
	Workers int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger; nil does not log.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Image == "" {
		o.Image = "talkide:latest"
	}
	if o.ControlPlaneNamespace == "" {
		o.ControlPlaneNamespace = "talkide"
	}
	defaults.IfZero(&o.ControlPlanePort, 7878)
	if o.ControlPlaneURL == "" {
		o.ControlPlaneURL = fmt.Sprintf("http://talkide-controlplane.%s.svc.cluster.local:%d", o.ControlPlaneNamespace, o.ControlPlanePort)
	}
	defaults.IfZero(&o.WorkerPort, 8080)
	def := func(q *resource.Quantity, s string) {
		if q.IsZero() {
			*q = resource.MustParse(s)
		}
	}
	def(&o.SessionsSize, "10Gi")
	def(&o.CPURequest, "250m")
	def(&o.MemoryRequest, "512Mi")
	def(&o.CPULimit, "2")
	def(&o.MemoryLimit, "2Gi")
	defaults.IfZero(&o.TokenTTL, provision.DefaultTokenTTL)
	if o.RotateBefore == 0 {
		o.RotateBefore = 7 * 24 * time.Hour
	}
	defaults.IfZero(&o.Grace, 10*time.Minute)
	defaults.IfZero(&o.Resync, 5*time.Minute)
	defaults.IfZero(&o.EnvPoll, 10*time.Second)
	defaults.IfZero(&o.Workers, 2)
	defaults.Clock(&o.Now)
	defaults.Logger(&o.Logger)
}

// Provisioner makes the cluster match the store's tenant-envs. Its methods
// are safe for concurrent use; two syncs of the same env at once are
// serialised by the optimistic lock on the token Secret (ErrConflict).
type Provisioner struct {
	cs   kubernetes.Interface
	st   store.Store
	keys *trust.Keyring // the master command secrets
	o    Options
	log  *slog.Logger
	kick chan struct{} // Resync's request to Run
}

// Resync asks a running reconciler to sync every env now rather than at
// its next resync: after a command key rotation, so that the workers'
// Secrets carry the new key well before it signs. It never blocks; with
// no reconciler running it is remembered for the next Run, which syncs
// everything at its start anyway.
func (p *Provisioner) Resync() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// New returns a Provisioner that works through cs on the tenant-envs of
// st. commandSecret and commandKeyID are the control-plane's master command
// secret and its id, from which each env's worker command key is derived;
// Options.CommandKeys, when set, replaces them.
func New(cs kubernetes.Interface, st store.Store, commandSecret []byte, commandKeyID string, opts *Options) *Provisioner {
	o := defaults.Copy(opts)
	keys := o.CommandKeys
	if keys == nil {
		var err error
		if keys, err = trust.NewKeyring(commandKeyID, map[string][]byte{commandKeyID: commandSecret}); err != nil {
			keys = nil
		}
	}
	if cs == nil || st == nil || keys == nil {
		panic("kubeprovision: New needs a clientset, a store and the command secret with its id")
	}
	o.setDefaults()
	return &Provisioner{cs: cs, st: st, keys: keys, o: o, log: o.Logger, kick: make(chan struct{}, 1)}
}

// commandKey is the master secret workers get: the newest, from the moment
// it is added, so that they hold it before the control-plane signs with it.
func (p *Provisioner) commandKey() trust.Key { return p.keys.Newest() }

// WorkerURL is the URL at which the control-plane reaches the worker of
// tenant/env through its Service; Sync records it as the env's worker URL.
func (p *Provisioner) WorkerURL(tenant, env string) string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", WorkerName, provision.Namespace(tenant, env), p.o.WorkerPort)
}
