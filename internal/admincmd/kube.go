package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/kubeprovision"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
)

// KubeFlags say which cluster to reach and how to provision workers in
// it; talkide controlplane --kubernetes and talkide admin env/token share
// them, so a sync by hand builds exactly what the reconciler builds.
type KubeFlags struct {
	kubeconfig   string
	image        string
	cpURL        string
	cpNamespace  string
	storageClass string
	sessionsSize string
	egressAllow  []string
	workerArgs   []string
	// The worker container's resources, as quantities (e.g. 250m, 512Mi).
	cpuRequest, memoryRequest, cpuLimit, memoryLimit string
	tokenTTL                                         time.Duration
	rotateBefore                                     time.Duration
	grace                                            time.Duration
	resync                                           time.Duration
	envPoll                                          time.Duration
}

// Add registers the flags into fs.
func (k *KubeFlags) Add(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount)")
	fs.StringVar(&k.image, "worker-image", "talkide:latest", "container image of the tenant-env workers")
	fs.StringVar(&k.cpURL, "worker-controlplane-url", "", "the control-plane as workers reach it (default http://talkide-controlplane.NAMESPACE.svc.cluster.local:7878)")
	fs.StringVar(&k.cpNamespace, "controlplane-namespace", "talkide", "namespace of the control-plane: the only one workers take commands from and send to, and the leader election's")
	fs.StringVar(&k.storageClass, "sessions-storage-class", "", "storage class of each env's claude-sessions claim (ReadWriteMany; default the cluster's default class)")
	fs.StringVar(&k.sessionsSize, "sessions-size", "10Gi", "size of each env's claude-sessions claim")
	fs.StringSliceVar(&k.egressAllow, "worker-egress-allow", nil, "CIDR[:PORT[:PORT...]] the workers may reach besides the control-plane and DNS (the Kubernetes API for builds, mirrors); repeat")
	fs.StringSliceVar(&k.workerArgs, "worker-arg", nil, "extra argument for talkide worker in the worker pods (e.g. --harness=claude-code); repeat")
	fs.StringVar(&k.cpuRequest, "worker-cpu-request", "250m", "CPU request of each worker pod (every replica asks for it: a node must fit the env's replicas)")
	fs.StringVar(&k.memoryRequest, "worker-memory-request", "512Mi", "memory request of each worker pod")
	fs.StringVar(&k.cpuLimit, "worker-cpu-limit", "2", "CPU limit of each worker pod (its turns and sandboxed commands share it)")
	fs.StringVar(&k.memoryLimit, "worker-memory-limit", "2Gi", "memory limit of each worker pod")
	fs.DurationVar(&k.tokenTTL, "token-ttl", provision.DefaultTokenTTL, "lifetime of the identity tokens the provisioner issues")
	fs.DurationVar(&k.rotateBefore, "rotate-before", 7*24*time.Hour, "rotate an identity token automatically this long before it expires")
	fs.DurationVar(&k.grace, "rotation-grace", 10*time.Minute, "how long a rotated-out identity token stays valid (longer than the kubelet takes to update a mounted Secret)")
	fs.DurationVar(&k.resync, "resync", 5*time.Minute, "how often the reconciler syncs every tenant-env without an event")
	fs.DurationVar(&k.envPoll, "env-poll", 10*time.Second, "how often the reconciler looks in the store for tenant-envs it has not synced yet (talkide admin env add), and syncs those at once")
	cli.BindEnv(fs, "kubeconfig", "worker-image", "worker-controlplane-url", "controlplane-namespace", "sessions-storage-class",
		"sessions-size", "worker-egress-allow", "worker-arg",
		"worker-cpu-request", "worker-memory-request", "worker-cpu-limit", "worker-memory-limit", "token-ttl", "rotate-before", "rotation-grace", "resync", "env-poll")
}

func (k *KubeFlags) client() (kubernetes.Interface, error) {
	return kubeClient(k.kubeconfig, "talkide-control-plane")
}

// kubeClient is a client of the cluster kubeconfig names (empty: the
// default rules, then the in-cluster ServiceAccount), as userAgent.
func kubeClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w (pass --kubeconfig FILE, or run in a pod)", err)
	}
	cfg.UserAgent = userAgent
	return kubernetes.NewForConfig(cfg)
}

func (k *KubeFlags) options() (*kubeprovision.Options, error) {
	size, err := resource.ParseQuantity(k.sessionsSize)
	if err != nil || size.Sign() <= 0 {
		return nil, fmt.Errorf("--sessions-size %q: want a positive quantity such as 10Gi", k.sessionsSize)
	}
	res := map[string]*resource.Quantity{}
	for _, q := range []struct {
		flag, v string
	}{{"--worker-cpu-request", k.cpuRequest}, {"--worker-memory-request", k.memoryRequest}, {"--worker-cpu-limit", k.cpuLimit}, {"--worker-memory-limit", k.memoryLimit}} {
		v, err := resource.ParseQuantity(q.v)
		if err != nil || v.Sign() <= 0 {
			return nil, fmt.Errorf("%s %q: want a positive quantity such as 250m or 512Mi", q.flag, q.v)
		}
		res[q.flag] = &v
	}
	for _, kind := range []string{"cpu", "memory"} {
		if req, lim := res["--worker-"+kind+"-request"], res["--worker-"+kind+"-limit"]; req.Cmp(*lim) > 0 {
			return nil, fmt.Errorf("--worker-%s-request %s is more than --worker-%s-limit %s", kind, req, kind, lim)
		}
	}
	var egress []kubeprovision.EgressPeer
	for _, e := range k.egressAllow {
		parts := strings.Split(e, ":")
		peer := kubeprovision.EgressPeer{CIDR: parts[0]}
		if !strings.Contains(parts[0], "/") {
			return nil, fmt.Errorf("--worker-egress-allow %q: want CIDR[:PORT...], e.g. 10.96.0.1/32:443", e)
		}
		for _, p := range parts[1:] {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("--worker-egress-allow %q: port %q", e, p)
			}
			peer.Ports = append(peer.Ports, int32(n))
		}
		egress = append(egress, peer)
	}
	for name, d := range map[string]time.Duration{"--token-ttl": k.tokenTTL, "--rotate-before": k.rotateBefore, "--rotation-grace": k.grace, "--resync": k.resync, "--env-poll": k.envPoll} {
		if d <= 0 {
			return nil, fmt.Errorf("%s %s: want a positive duration", name, d)
		}
	}
	if k.rotateBefore >= k.tokenTTL {
		return nil, fmt.Errorf("--rotate-before %s must be shorter than --token-ttl %s", k.rotateBefore, k.tokenTTL)
	}
	return &kubeprovision.Options{
		Image: k.image, ControlPlaneURL: k.cpURL, ControlPlaneNamespace: k.cpNamespace,
		StorageClass: k.storageClass, SessionsSize: size, EgressAllow: egress, WorkerArgs: k.workerArgs,
		CPURequest: *res["--worker-cpu-request"], MemoryRequest: *res["--worker-memory-request"],
		CPULimit: *res["--worker-cpu-limit"], MemoryLimit: *res["--worker-memory-limit"],
		TokenTTL: k.tokenTTL, RotateBefore: k.rotateBefore, Grace: k.grace, Resync: k.resync, EnvPoll: k.envPoll,
	}, nil
}

// adminProvisioner opens the store and the cluster for an admin command.
func (k *KubeFlags) adminProvisioner(ctx context.Context, loc *cpLocation, stderr io.Writer) (*kubeprovision.Provisioner, func(), error) {
	opts, err := k.options()
	if err != nil {
		return nil, nil, err
	}
	secrets, err := loc.secrets()
	if err != nil {
		return nil, nil, err
	}
	cs, err := k.client()
	if err != nil {
		return nil, nil, err
	}
	st, err := loc.open(ctx, stderr)
	if err != nil {
		return nil, nil, err
	}
	opts.CommandKeys = secrets.Commands()
	return kubeprovision.New(cs, st, nil, "", opts), func() { st.Close() }, nil
}

func requireEnv(tenant, env string) error {
	if tenant == "" || env == "" {
		return errors.New("--tenant and --env are required")
	}
	return provision.ValidateNames(tenant, env)
}

func printChanges(w io.Writer, changes []kubeprovision.Change) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tACTION")
	for _, c := range changes {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Kind, c.Name, c.Action)
	}
	return tw.Flush()
}

func printRotation(w io.Writer, r *kubeprovision.Rotation) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "identity token %s issued (%s), valid until %s\n", r.NewID, r.Reason, cli.FormatTime(r.ExpiresAt))
	if r.OldID != "" {
		fmt.Fprintf(w, "identity token %s stays valid until %s, then is refused\n", r.OldID, cli.FormatTime(r.OldUntil))
	}
}

// kubeEnvLeaf is an admin command about one tenant-env's Kubernetes
// objects: it takes the tenant-env as --tenant and --env or as the
// arguments TENANT ENV, and the cluster flags, checks them (and what check
// adds) before reaching the cluster, and hands run a provisioner. The
// caller adds its own flags to the returned command.
func kubeEnvLeaf(std cli.Stdio, use, short string, check func() error, run func(ctx context.Context, p *kubeprovision.Provisioner, tenant, env string, stdout io.Writer) error) *cobra.Command {
	var loc cpLocation
	var kf KubeFlags
	var tenant, env string
	cmd := adminLeaf(std, use, short, &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if err := requireEnv(tenant, env); err != nil {
			return err
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		p, done, err := kf.adminProvisioner(ctx, &loc, stderr)
		if err != nil {
			return err
		}
		defer done()
		return run(ctx, p, tenant, env, stdout)
	})
	cmd.Use = use + " [TENANT ENV]"
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) != 0 && len(args) != 2 {
			return cli.Usagef(c, "want the arguments TENANT ENV (or --tenant and --env), got %d argument(s)", len(args))
		}
		return nil
	}
	body := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 2 {
			if (tenant != "" && tenant != args[0]) || (env != "" && env != args[1]) {
				return cli.Usagef(c, "the arguments %s %s and --tenant %q --env %q disagree: give one or the other", args[0], args[1], tenant, env)
			}
			tenant, env = args[0], args[1]
		}
		return body(c, args)
	}
	fs := cmd.Flags()
	fs.StringVar(&tenant, "tenant", "", "tenant (required, or the first argument)")
	fs.StringVar(&env, "env", "", "env (required, or the second argument)")
	kf.Add(fs)
	return cmd
}

func newAdminEnvSyncCmd(std cli.Stdio) *cobra.Command {
	return kubeEnvLeaf(std, "sync", "Reconcile one tenant-env's Kubernetes objects once and print what changed", nil, func(ctx context.Context, p *kubeprovision.Provisioner, tenant, env string, stdout io.Writer) error {
		res, err := p.Sync(ctx, tenant, env, nil)
		if len(res.Changes) > 0 {
			printChanges(stdout, res.Changes)
		}
		if err != nil {
			return err
		}
		printRotation(stdout, res.Rotation)
		if !res.Changed() {
			fmt.Fprintf(stdout, "%s/%s: nothing changed\n", tenant, env)
		}
		return nil
	})
}

func newAdminEnvStatusCmd(std cli.Stdio) *cobra.Command {
	return kubeEnvLeaf(std, "status", "Show a tenant-env's Kubernetes objects and whether its worker is ready", nil, func(ctx context.Context, p *kubeprovision.Provisioner, tenant, env string, stdout io.Writer) error {
		st, err := p.Status(ctx, tenant, env)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tNAME\tEXISTS\tDETAIL")
		for _, o := range st.Objects {
			d := o.Detail
			if d == "" {
				d = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", o.Kind, o.Name, o.Exists, d)
		}
		tw.Flush()
		state := "live"
		if st.Retired {
			state = "retired"
		}
		fmt.Fprintf(stdout, "%s/%s (%s): worker ready: %v\n", tenant, env, state, st.Ready)
		fmt.Fprintf(stdout, "replicas: %d desired, %d ready; scale: %s\n", st.DesiredReplicas, st.ReadyReplicas, st.Scale.Summary())
		switch {
		case st.Autoscaler != "":
			fmt.Fprintf(stdout, "autoscaler: %s\n", st.Autoscaler)
		case st.Scale.Autoscaled():
			fmt.Fprintln(stdout, "autoscaler: none yet (the next sync creates it)")
		default:
			fmt.Fprintln(stdout, "autoscaler: none (fixed count)")
		}
		return nil
	})
}

func newAdminEnvScaleCmd(std cli.Stdio) *cobra.Command {
	var replicas, lo, hi, turns int
	var cmd *cobra.Command
	var sc store.EnvScale
	check := func() error {
		fs := cmd.Flags()
		fixed, ranged := fs.Changed("replicas"), fs.Changed("min") || fs.Changed("max")
		inRange := func(flag string, n, hi int) error {
			if n < 1 || n > hi {
				return fmt.Errorf("--%s %d: want a whole number from 1 to %d", flag, n, hi)
			}
			return nil
		}
		switch {
		case fixed && (ranged || fs.Changed("turns-per-replica")):
			return errors.New("--replicas N is a fixed count; --min, --max and --turns-per-replica are an autoscaled range: give one or the other")
		case fixed:
			sc = store.EnvScale{MinReplicas: replicas, MaxReplicas: replicas}
			return inRange("replicas", replicas, store.MaxEnvReplicas)
		case !fs.Changed("min") || !fs.Changed("max"):
			return errors.New("give --replicas N (a fixed count) or both --min A and --max B (an autoscaled range)")
		}
		sc = store.EnvScale{MinReplicas: lo, MaxReplicas: hi, TurnsPerReplica: turns}
		for _, f := range []struct {
			name  string
			n, hi int
		}{{"min", lo, store.MaxEnvReplicas}, {"max", hi, store.MaxEnvReplicas}, {"turns-per-replica", turns, store.MaxTurnsPerReplica}} {
			if f.name == "turns-per-replica" && !fs.Changed(f.name) {
				continue // 0: the default, which stays the default if it changes
			}
			if err := inRange(f.name, f.n, f.hi); err != nil {
				return err
			}
		}
		if lo > hi {
			return fmt.Errorf("--min %d is above --max %d", lo, hi)
		}
		return nil
	}
	cmd = kubeEnvLeaf(std, "scale", "Set how many worker replicas a tenant-env runs, a fixed count or an autoscaled range, and sync its objects",
		check, func(ctx context.Context, p *kubeprovision.Provisioner, tenant, env string, stdout io.Writer) error {
			res, err := p.SetScale(ctx, tenant, env, sc)
			if len(res.Sync.Changes) > 0 {
				printChanges(stdout, res.Sync.Changes)
			}
			if err != nil {
				return err
			}
			printRotation(stdout, res.Sync.Rotation)
			if res.Before == res.After {
				fmt.Fprintf(stdout, "%s/%s: scale unchanged, %s\n", tenant, env, res.After.Summary())
			} else {
				fmt.Fprintf(stdout, "%s/%s: scale %s -> %s\n", tenant, env, res.Before.Summary(), res.After.Summary())
			}
			if res.After.Autoscaled() {
				fmt.Fprintf(stdout, "the autoscaler needs the pods metric %s from a custom-metrics adapter; without one it holds %d replica(s) (talkide admin env status shows its state)\n",
					kubeprovision.TurnsMetric, res.After.MinReplicas)
			}
			return nil
		})
	fs := cmd.Flags()
	fs.IntVar(&replicas, "replicas", 0, fmt.Sprintf("a fixed count of worker replicas, 1 to %d", store.MaxEnvReplicas))
	fs.IntVar(&lo, "min", 0, "the autoscaler's fewest replicas (with --max)")
	fs.IntVar(&hi, "max", 0, fmt.Sprintf("the autoscaler's most replicas (with --min; at most %d)", store.MaxEnvReplicas))
	fs.IntVar(&turns, "turns-per-replica", 0, fmt.Sprintf("the autoscaler's target of running turns per replica (with --min and --max; default %d)", store.DefaultTurnsPerReplica))
	return cmd
}

func newAdminEnvDeleteCmd(std cli.Stdio) *cobra.Command {
	var keep bool
	cmd := kubeEnvLeaf(std, "delete", "Retire a tenant-env: revoke its identity tokens, then delete its namespace (or, with --keep-sessions, all but the namespace and its session claim)", nil, func(ctx context.Context, p *kubeprovision.Provisioner, tenant, env string, stdout io.Writer) error {
		res, err := p.Delete(ctx, tenant, env, &kubeprovision.DeleteOptions{KeepSessions: keep})
		fmt.Fprintf(stdout, "revoked %d identity token(s) of %s/%s\n", len(res.Revoked), tenant, env)
		if len(res.Changes) > 0 {
			printChanges(stdout, res.Changes)
		}
		if err != nil {
			return err
		}
		if keep {
			fmt.Fprintf(stdout, "kept namespace %s and its claim %s; talkide admin env add --tenant %s --env %s --worker-url URL and a sync re-attach them\n",
				res.Namespace, kubeprovision.SessionsClaim, tenant, env)
		}
		return nil
	})
	cmd.Flags().BoolVar(&keep, "keep-sessions", false, "keep the namespace and its claude-sessions claim, deleting everything else")
	return cmd
}

func newAdminTokenRotateCmd(std cli.Stdio) *cobra.Command {
	var grace time.Duration
	check := func() error {
		if grace <= 0 {
			return fmt.Errorf("--grace %s: want a positive duration", grace)
		}
		return nil
	}
	cmd := kubeEnvLeaf(std, "rotate", "Issue a new identity token into the tenant-env's Secret; the old one stays valid for --grace, then is refused", check, func(ctx context.Context, p *kubeprovision.Provisioner, tenant, env string, stdout io.Writer) error {
		res, err := p.Sync(ctx, tenant, env, &kubeprovision.SyncOptions{Rotate: true, Grace: grace})
		if err != nil {
			return err
		}
		printRotation(stdout, res.Rotation)
		return nil
	})
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Minute, "how long the old token stays valid")
	return cmd
}

// Provisioner is talkide controlplane --kubernetes's provisioner: the
// cluster and the options the flags name.
func (k *KubeFlags) Provisioner() (*roles.ProvisionerConfig, error) {
	opts, err := k.options()
	if err != nil {
		return nil, err
	}
	cs, err := k.client()
	if err != nil {
		return nil, err
	}
	return &roles.ProvisionerConfig{Client: cs, Options: opts, Namespace: k.cpNamespace}, nil
}
