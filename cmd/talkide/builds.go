package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sandbox"
)

// buildFlags choose and shape the Build tool's runner (docs/builds.md);
// talkide dev and talkide worker share them.
type buildFlags struct {
	runner         string // local, kubernetes or none
	kubeconfig     string
	namespace      string
	image          string
	imageBuilder   string
	registrySecret string
	claim          string
	claimMount     string
	cacheClaim     string
	nodeSelector   map[string]string
	tolerations    []string
	maxConcurrent  int
	runAsUser      int64
	// timeout is a build's deadline when its call names none (both
	// runners); the Job's activeDeadlineSeconds.
	timeout time.Duration
	// The build container's requests and limits (Kubernetes).
	cpuRequest, cpuLimit, memoryRequest, memoryLimit string
	// The local runner's limits of a build's process tree, in place of
	// the jail's (a JVM wants more than a shell command); zero: the jail's.
	localMemory, localFileSize string
	localProcs                 int
	localCPU                   time.Duration
}

func registerBuildFlags(fs *pflag.FlagSet, b *buildFlags) {
	fs.StringVar(&b.runner, "builds", "local", "where the Build tool runs builds: local (a process in the conversation's sandbox), kubernetes (a Job in --build-namespace) or none (no Build tool); docs/builds.md")
	fs.StringVar(&b.kubeconfig, "kubeconfig", "", "kubeconfig file for --builds kubernetes outside a cluster (default: in-cluster, then $KUBECONFIG and ~/.kube/config)")
	fs.StringVar(&b.namespace, "build-namespace", "", "namespace of the build Jobs (default: the worker's own, or the kubeconfig context's)")
	fs.StringVar(&b.image, "build-image", "", "Gradle builder image of the build Jobs (a JDK; the project's wrapper brings Gradle)")
	fs.StringVar(&b.imageBuilder, "build-image-builder", "", "image of a maintained Kaniko fork's executor for image builds; empty refuses image builds")
	fs.StringVar(&b.registrySecret, "build-registry-secret", "", "kubernetes.io/dockerconfigjson Secret the image builder pushes with")
	fs.StringVar(&b.claim, "build-claim", build.DefaultClaimName, "PersistentVolumeClaim of the session volume holding the workspaces, mounted into build Jobs by subPath")
	fs.StringVar(&b.claimMount, "build-claim-mount", "", "where the worker mounts --build-claim; the workspaces must be below it (default: CLAUDE_CONFIG_DIR's parent)")
	fs.StringVar(&b.cacheClaim, "build-cache-claim", "", "ReadWriteMany claim holding the read-only Gradle dependency cache (GRADLE_RO_DEP_CACHE); empty: none")
	fs.StringToStringVar(&b.nodeSelector, "build-node-selector", nil, "node labels of the build node pool, KEY=VALUE,...")
	fs.StringSliceVar(&b.tolerations, "build-toleration", nil, "taints build Jobs tolerate, KEY[=VALUE]:EFFECT; repeat or separate with commas")
	fs.IntVar(&b.maxConcurrent, "build-max-concurrent", build.DefaultMaxConcurrent, "build Jobs in flight at once; more wait in a queue")
	fs.Int64Var(&b.runAsUser, "build-run-as-user", build.DefaultRunAsUser, "uid and gid of the Gradle builders: the owner of the workspace files")
	fs.DurationVar(&b.timeout, "build-timeout", build.DefaultTimeout, "deadline of a build whose call names none (a Job's activeDeadlineSeconds), at most "+build.MaxTimeout.String())
	fs.StringVar(&b.cpuRequest, "build-cpu-request", build.DefaultCPURequest, "CPU request of a build Job's container")
	fs.StringVar(&b.cpuLimit, "build-cpu-limit", build.DefaultCPULimit, "CPU limit of a build Job's container")
	fs.StringVar(&b.memoryRequest, "build-memory-request", build.DefaultMemoryRequest, "memory request of a build Job's container")
	fs.StringVar(&b.memoryLimit, "build-memory-limit", build.DefaultMemoryLimit, "memory limit of a build Job's container")
	fs.StringVar(&b.localMemory, "build-local-memory", "", "memory of a local build: each process's RLIMIT_DATA and the tree's resident total, like 4Gi (default: the sandbox's, 2Gi)")
	fs.StringVar(&b.localFileSize, "build-local-file-size", "", "largest file a local build writes, like 2Gi (default: the sandbox's, 1Gi)")
	fs.IntVar(&b.localProcs, "build-local-procs", 0, "processes a local build may hold at once (default: the sandbox's, 256)")
	fs.DurationVar(&b.localCPU, "build-local-cpu-time", 0, "CPU time of each process of a local build (default: the sandbox's, 20m)")
	bindEnv(fs, "builds", "kubeconfig", "build-namespace", "build-image", "build-image-builder", "build-registry-secret", "build-claim",
		"build-claim-mount", "build-cache-claim", "build-node-selector", "build-toleration", "build-max-concurrent", "build-run-as-user",
		"build-timeout", "build-cpu-request", "build-cpu-limit", "build-memory-request", "build-memory-limit",
		"build-local-memory", "build-local-file-size", "build-local-procs", "build-local-cpu-time")
}

// resources returns the build container's requests and limits, checked:
// positive quantities, no request above its limit.
func (b *buildFlags) resources() (corev1.ResourceRequirements, error) {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, f := range []struct {
		flag, value, def string
		list             corev1.ResourceList
		name             corev1.ResourceName
	}{
		{"build-cpu-request", b.cpuRequest, build.DefaultCPURequest, r.Requests, corev1.ResourceCPU},
		{"build-cpu-limit", b.cpuLimit, build.DefaultCPULimit, r.Limits, corev1.ResourceCPU},
		{"build-memory-request", b.memoryRequest, build.DefaultMemoryRequest, r.Requests, corev1.ResourceMemory},
		{"build-memory-limit", b.memoryLimit, build.DefaultMemoryLimit, r.Limits, corev1.ResourceMemory},
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

// localLimits returns the local runner's limits, checked; zero fields
// leave the jail's.
func (b *buildFlags) localLimits() (sandbox.Limits, error) {
	var l sandbox.Limits
	for _, f := range []struct {
		flag, value string
		into        *int64
	}{{"build-local-memory", b.localMemory, &l.MaxMemory}, {"build-local-file-size", b.localFileSize, &l.MaxFileSize}} {
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
	if b.localProcs < 0 {
		return l, contract.Invalid(nil, "build-local-procs", "%d: want a positive count", b.localProcs)
	}
	if b.localCPU < 0 || (b.localCPU > 0 && b.localCPU < time.Second) {
		return l, contract.Invalid(nil, "build-local-cpu-time", "%s: want at least 1s", b.localCPU)
	}
	l.MaxProcs, l.MaxCPU = b.localProcs, b.localCPU
	return l, nil
}

// check validates the flags that need nothing else.
func (b *buildFlags) check() error {
	switch b.runner {
	case "", "local", "kubernetes", "none":
	default:
		return contract.Invalid(nil, "builds", "%q: want local, kubernetes or none", b.runner)
	}
	if _, err := parseTolerations(b.tolerations); err != nil {
		return contract.Invalid(nil, "build-toleration", "%v", err)
	}
	if b.timeout < 0 || b.timeout > build.MaxTimeout {
		return contract.Invalid(nil, "build-timeout", "%s: want more than 0 and at most %s", b.timeout, build.MaxTimeout)
	}
	if _, err := b.resources(); err != nil {
		return err
	}
	if _, err := b.localLimits(); err != nil {
		return err
	}
	return nil
}

// newBuildRunner returns the runner the flags name, or nil for none.
func newBuildRunner(b buildFlags, o workerOptions, log *slog.Logger) (build.Runner, error) {
	switch b.runner {
	case "none":
		return nil, nil
	case "", "local":
		limits, err := b.localLimits()
		if err != nil {
			return nil, err
		}
		return build.NewLocal(&build.LocalOptions{Timeout: b.timeout, Limits: limits}), nil
	}
	resources, err := b.resources()
	if err != nil {
		return nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = b.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--builds kubernetes: no Kubernetes configuration (in-cluster or --kubeconfig): %w", err)
	}
	ns := b.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("--builds kubernetes: the worker's namespace: %w (set --build-namespace)", err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--builds kubernetes: %w", err)
	}
	mount := b.claimMount
	if mount == "" {
		mount = filepath.Dir(filepath.Clean(o.claudeConfigDir))
	}
	mount, _ = filepath.Abs(mount)
	ws, _ := filepath.Abs(o.workspaceRoot)
	if rel, err := filepath.Rel(mount, ws); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return nil, fmt.Errorf("--builds kubernetes: the workspaces (%s) are not below the mount of the session claim (%s): a build Job could not mount them; set --workspaces or --build-claim-mount", ws, mount)
	}
	tols, _ := parseTolerations(b.tolerations)
	return build.NewKubernetes(cs, &build.KubernetesOptions{
		Namespace: ns, Tenant: o.tenant, Env: o.env,
		Image: b.image, ImageBuilder: b.imageBuilder, RegistrySecret: b.registrySecret,
		ClaimName: b.claim, VolumeRoot: mount, CacheClaim: b.cacheClaim, RunAsUser: b.runAsUser,
		NodeSelector: b.nodeSelector, Tolerations: tols, MaxConcurrent: b.maxConcurrent,
		Resources: resources, Timeout: b.timeout,
		Logger: log,
	})
}

// parseTolerations reads KEY[=VALUE]:EFFECT.
func parseTolerations(specs []string) ([]corev1.Toleration, error) {
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
