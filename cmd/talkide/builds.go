package main

import (
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
)

// registerBuildFlags registers the Build runner's flags (docs/builds.md)
// into b; talkide dev and talkide worker share them.
func registerBuildFlags(fs *pflag.FlagSet, b *roles.BuildConfig) {
	fs.StringVar(&b.Runner, "builds", "local", "where the Build tool runs builds: local (a process in the conversation's sandbox), kubernetes (a Job in --build-namespace) or none (no Build tool); docs/builds.md")
	fs.StringVar(&b.Kubeconfig, "kubeconfig", "", "kubeconfig file for --builds kubernetes outside a cluster (default: in-cluster, then $KUBECONFIG and ~/.kube/config)")
	fs.StringVar(&b.Namespace, "build-namespace", "", "namespace of the build Jobs (default: the worker's own, or the kubeconfig context's)")
	fs.StringVar(&b.Image, "build-image", "", "Gradle builder image of the build Jobs (a JDK; the project's wrapper brings Gradle)")
	fs.StringVar(&b.ImageBuilder, "build-image-builder", "", "image of a maintained Kaniko fork's executor for image builds; empty refuses image builds")
	fs.StringVar(&b.RegistrySecret, "build-registry-secret", "", "kubernetes.io/dockerconfigjson Secret the image builder pushes with")
	fs.StringVar(&b.Claim, "build-claim", build.DefaultClaimName, "PersistentVolumeClaim of the session volume holding the workspaces, mounted into build Jobs by subPath")
	fs.StringVar(&b.ClaimMount, "build-claim-mount", "", "where the worker mounts --build-claim; the workspaces must be below it (default: CLAUDE_CONFIG_DIR's parent)")
	fs.StringVar(&b.CacheClaim, "build-cache-claim", "", "ReadWriteMany claim holding the read-only Gradle dependency cache (GRADLE_RO_DEP_CACHE); empty: none")
	fs.StringToStringVar(&b.NodeSelector, "build-node-selector", nil, "node labels of the build node pool, KEY=VALUE,...")
	fs.StringSliceVar(&b.Tolerations, "build-toleration", nil, "taints build Jobs tolerate, KEY[=VALUE]:EFFECT; repeat or separate with commas")
	fs.IntVar(&b.MaxConcurrent, "build-max-concurrent", build.DefaultMaxConcurrent, "build Jobs in flight at once; more wait in a queue")
	fs.Int64Var(&b.RunAsUser, "build-run-as-user", build.DefaultRunAsUser, "uid and gid of the Gradle builders: the owner of the workspace files")
	fs.DurationVar(&b.Timeout, "build-timeout", build.DefaultTimeout, "deadline of a build whose call names none (a Job's activeDeadlineSeconds), at most "+build.MaxTimeout.String())
	fs.StringVar(&b.CPURequest, "build-cpu-request", build.DefaultCPURequest, "CPU request of a build Job's container")
	fs.StringVar(&b.CPULimit, "build-cpu-limit", build.DefaultCPULimit, "CPU limit of a build Job's container")
	fs.StringVar(&b.MemoryRequest, "build-memory-request", build.DefaultMemoryRequest, "memory request of a build Job's container")
	fs.StringVar(&b.MemoryLimit, "build-memory-limit", build.DefaultMemoryLimit, "memory limit of a build Job's container")
	fs.StringVar(&b.LocalMemory, "build-local-memory", "", "memory of a local build: each process's RLIMIT_DATA and the tree's resident total, like 4Gi (default: the sandbox's, 2Gi)")
	fs.StringVar(&b.LocalFileSize, "build-local-file-size", "", "largest file a local build writes, like 2Gi (default: the sandbox's, 1Gi)")
	fs.IntVar(&b.LocalProcs, "build-local-procs", 0, "processes a local build may hold at once (default: the sandbox's, 256)")
	fs.DurationVar(&b.LocalCPU, "build-local-cpu-time", 0, "CPU time of each process of a local build (default: the sandbox's, 20m)")
	cli.BindEnv(fs, "builds", "kubeconfig", "build-namespace", "build-image", "build-image-builder", "build-registry-secret", "build-claim",
		"build-claim-mount", "build-cache-claim", "build-node-selector", "build-toleration", "build-max-concurrent", "build-run-as-user",
		"build-timeout", "build-cpu-request", "build-cpu-limit", "build-memory-request", "build-memory-limit",
		"build-local-memory", "build-local-file-size", "build-local-procs", "build-local-cpu-time")
}
