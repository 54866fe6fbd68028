package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/contract"
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
	bindEnv(fs, "builds", "kubeconfig", "build-namespace", "build-image", "build-image-builder", "build-registry-secret", "build-claim",
		"build-claim-mount", "build-cache-claim", "build-node-selector", "build-toleration", "build-max-concurrent", "build-run-as-user")
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
	return nil
}

// newBuildRunner returns the runner the flags name, or nil for none.
func newBuildRunner(b buildFlags, o workerOptions, log *slog.Logger) (build.Runner, error) {
	switch b.runner {
	case "none":
		return nil, nil
	case "", "local":
		return build.NewLocal(nil), nil
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
