package roles

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sandbox"
)

// BuildConfig chooses and shapes the Build tool's runner (docs/builds.md).
// Problems are reported by the name of the flag that sets the field.
type BuildConfig struct {
	Runner         string // local (default), kubernetes or none
	Kubeconfig     string
	Namespace      string
	Image          string
	ImageBuilder   string
	RegistrySecret string
	Claim          string
	ClaimMount     string
	CacheClaim     string
	NodeSelector   map[string]string
	Tolerations    []string
	MaxConcurrent  int
	RunAsUser      int64
	// Timeout is a build's deadline when its call names none (both
	// runners); the Job's activeDeadlineSeconds.
	Timeout time.Duration
	// The build container's requests and limits (Kubernetes).
	CPURequest, CPULimit, MemoryRequest, MemoryLimit string
	// The local runner's limits of a build's process tree, in place of
	// the jail's (a JVM wants more than a shell command); zero: the jail's.
	LocalMemory, LocalFileSize string
	LocalProcs                 int
	LocalCPU                   time.Duration
}

// Resources returns the build container's requests and limits, checked:
// positive quantities, no request above its limit.
func (b *BuildConfig) Resources() (corev1.ResourceRequirements, error) {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, f := range []struct {
		flag, value, def string
		list             corev1.ResourceList
		name             corev1.ResourceName
	}{
		{"build-cpu-request", b.CPURequest, build.DefaultCPURequest, r.Requests, corev1.ResourceCPU},
		{"build-cpu-limit", b.CPULimit, build.DefaultCPULimit, r.Limits, corev1.ResourceCPU},
		{"build-memory-request", b.MemoryRequest, build.DefaultMemoryRequest, r.Requests, corev1.ResourceMemory},
		{"build-memory-limit", b.MemoryLimit, build.DefaultMemoryLimit, r.Limits, corev1.ResourceMemory},
	} {
		if f.value == "" {
			f.value = f.def
		}
		q, err := resource.ParseQuantity(f.value)
		if err != nil || q.Sign() <= 0 {
			return r, contract.Invalid(nil, f.flag, "%q: want a positive quantity (like 500m, 2 or 4Gi)", f.value)
		}
		f.list[f.name] = q
	}
	for _, n := range []struct {
		name corev1.ResourceName
		flag string
	}{{corev1.ResourceCPU, "build-cpu-request"}, {corev1.ResourceMemory, "build-memory-request"}} {
		req, lim := r.Requests[n.name], r.Limits[n.name]
		if req.Cmp(lim) > 0 {
			return r, contract.Invalid(nil, n.flag, "%s is above the limit %s", req.String(), lim.String())
		}
	}
	return r, nil
}

// LocalLimits returns the local runner's limits, checked; zero fields
// leave the jail's.
func (b *BuildConfig) LocalLimits() (sandbox.Limits, error) {
	var l sandbox.Limits
	for _, f := range []struct {
		flag, value string
		into        *int64
	}{{"build-local-memory", b.LocalMemory, &l.MaxMemory}, {"build-local-file-size", b.LocalFileSize, &l.MaxFileSize}} {
		if f.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(f.value)
		n, ok := q.AsInt64()
		if err != nil || !ok || n < 1<<20 {
			return l, contract.Invalid(nil, f.flag, "%q: want a size of at least 1Mi, like 4Gi", f.value)
		}
		*f.into = n
	}
	if b.LocalProcs < 0 {
		return l, contract.Invalid(nil, "build-local-procs", "%d: want a positive count", b.LocalProcs)
	}
	if b.LocalCPU < 0 || (b.LocalCPU > 0 && b.LocalCPU < time.Second) {
		return l, contract.Invalid(nil, "build-local-cpu-time", "%s: want at least 1s", b.LocalCPU)
	}
	l.MaxProcs, l.MaxCPU = b.LocalProcs, b.LocalCPU
	return l, nil
}

// Pod returns the build pods' uid, placement and resources, checked: the
// build Jobs' and the cache-seeding Job's.
func (b *BuildConfig) Pod() (build.PodOptions, error) {
	tols, err := ParseTolerations(b.Tolerations)
	if err != nil {
		return build.PodOptions{}, contract.Invalid(nil, "build-toleration", "%v", err)
	}
	resources, err := b.Resources()
	if err != nil {
		return build.PodOptions{}, err
	}
	return build.PodOptions{RunAsUser: b.RunAsUser, NodeSelector: b.NodeSelector, Tolerations: tols, Resources: resources}, nil
}

// Check validates what needs nothing else.
func (b *BuildConfig) Check() error {
	switch b.Runner {
	case "", "local", "kubernetes", "none":
	default:
		return contract.Invalid(nil, "builds", "%q: want local, kubernetes or none", b.Runner)
	}
	if _, err := b.Pod(); err != nil {
		return err
	}
	if b.Timeout < 0 || b.Timeout > build.MaxTimeout {
		return contract.Invalid(nil, "build-timeout", "%s: want more than 0 and at most %s", b.Timeout, build.MaxTimeout)
	}
	if _, err := b.LocalLimits(); err != nil {
		return err
	}
	return nil
}

// newBuildRunner returns the runner b names, or nil for none.
func newBuildRunner(b BuildConfig, o WorkerConfig, log *slog.Logger) (build.Runner, error) {
	switch b.Runner {
	case "none":
		return nil, nil
	case "", "local":
		limits, err := b.LocalLimits()
		if err != nil {
			return nil, err
		}
		return build.NewLocal(&build.LocalOptions{Timeout: b.Timeout, Limits: limits}), nil
	}
	pod, err := b.Pod()
	if err != nil {
		return nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = b.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--builds kubernetes: no Kubernetes configuration (in-cluster or --kubeconfig): %w", err)
	}
	ns := b.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("--builds kubernetes: the worker's namespace: %w (set --build-namespace)", err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--builds kubernetes: %w", err)
	}
	mount := b.ClaimMount
	if mount == "" {
		mount = filepath.Dir(filepath.Clean(o.ClaudeConfigDir))
	}
	mount, _ = filepath.Abs(mount)
	ws, _ := filepath.Abs(o.WorkspaceRoot)
	if rel, err := filepath.Rel(mount, ws); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return nil, fmt.Errorf("--builds kubernetes: the workspaces (%s) are not below the mount of the session claim (%s): a build Job could not mount them; set --workspaces or --build-claim-mount", ws, mount)
	}
	return build.NewKubernetes(cs, &build.KubernetesOptions{
		Namespace: ns, Tenant: o.Tenant, Env: o.Env,
		Image: b.Image, ImageBuilder: b.ImageBuilder, RegistrySecret: b.RegistrySecret,
		ClaimName: b.Claim, VolumeRoot: mount, CacheClaim: b.CacheClaim, PodOptions: pod,
		MaxConcurrent: b.MaxConcurrent, Timeout: b.Timeout, Logger: log,
	})
}

// ParseTolerations reads KEY[=VALUE]:EFFECT.
func ParseTolerations(specs []string) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for _, s := range specs {
		kv, effect, ok := strings.Cut(s, ":")
		if !ok || kv == "" {
			return nil, fmt.Errorf("%q: want KEY[=VALUE]:EFFECT", s)
		}
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, errors.New(s + ": the effect must be NoSchedule, PreferNoSchedule or NoExecute")
		}
		t := corev1.Toleration{Effect: corev1.TaintEffect(effect), Operator: corev1.TolerationOpExists}
		if k, v, ok := strings.Cut(kv, "="); ok {
			t.Key, t.Value, t.Operator = k, v, corev1.TolerationOpEqual
		} else {
			t.Key = kv
		}
		out = append(out, t)
	}
	return out, nil
}
