package admincmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/buildcache"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/roles"
)

func newAdminBuildCacheCmd(std cli.Stdio) *cobra.Command {
	return cli.NewGroup("build-cache", "The read-only Gradle dependency cache of Kubernetes builds (docs/builds.md)",
		newAdminBuildCacheSeedCmd(std), newAdminBuildCachePromoteCmd(std))
}

// newAdminBuildCacheSeedCmd runs a seeding Job in a tenant-env's
// namespace. It takes the worker's --build-* flags by their names, so the
// same values place and shape it as the build Jobs.
func newAdminBuildCacheSeedCmd(std cli.Stdio) *cobra.Command {
	var (
		b                           roles.BuildConfig
		tenant, env, namespace      string
		project, gradle, talkideImg string
		timeout                     time.Duration
		noWait                      bool
	)
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Refresh a tenant-env's Gradle dependency cache: a Job writes a new generation from a seed project, then switches builds to it",
		Long: `Refresh the read-only Gradle dependency cache that the build Jobs of a
tenant-env mount (--build-cache-claim). A Job in the env's namespace runs
Gradle with a fresh Gradle home against the seed project (a directory on the
session claim, copied first: the seeding never writes into it), then its
second container, /talkide of --talkide-image, copies the downloaded modules
into a new generation on the cache claim and only then switches the pointer
builds resolve as they start. A build sees one whole generation; a failed
seeding leaves the pointer as it was. Generations retired longer than the
longest build deadline are removed by a later seeding.

One seeding of a cache runs at a time: while its Job runs, another is
refused. The command waits for the Job and prints what it did (--no-wait
returns once the Job exists). See docs/builds.md.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireEnv(tenant, env); err != nil {
				return err
			}
			if project == "" || b.CacheClaim == "" || b.Image == "" {
				return errors.New("--project, --build-cache-claim and --build-image are required")
			}
			pod, err := b.Pod()
			if err != nil {
				return err
			}
			if namespace == "" {
				namespace = provision.Namespace(tenant, env)
			}
			o := &buildcache.SeedOptions{
				Namespace: namespace, Tenant: tenant, Env: env,
				CacheClaim: b.CacheClaim, SessionClaim: b.Claim, Project: project,
				Gradle: strings.Fields(gradle), Image: b.Image, PromoteImage: talkideImg, PodOptions: pod, Timeout: timeout,
			}
			if err := o.Validate(); err != nil {
				return err
			}
			cs, err := kubeClient(b.Kubeconfig, "talkide-build-cache")
			if err != nil {
				return err
			}
			ctx, _, stop := cli.UntilSignal(cmd.Context(), std.Signals)
			defer stop()
			s, err := buildcache.Start(ctx, cs, o, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(std.Out, "seeding generation %s of the claim %s as Job %s\n", s.Generation, o.CacheClaim, s.Job)
			if noWait {
				return nil
			}
			if err := buildcache.Wait(ctx, cs, s, nil); err != nil {
				return err
			}
			printSeeding(std.Out, s.Result)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&tenant, "tenant", "", "tenant (required)")
	fs.StringVar(&env, "env", "", "env (required)")
	fs.StringVar(&namespace, "namespace", "", "namespace of the seeding Job (default: the tenant-env's, TENANT-ENV)")
	fs.StringVar(&b.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount)")
	fs.StringVar(&project, "project", "", "the seed project (required): its directory on --build-claim, relative to the claim's root, holding ./gradlew (like build-seed/gradle)")
	fs.StringVar(&gradle, "gradle", "build", "the Gradle tasks and options run in the seed project, space-separated (dependencies alone downloads no jars)")
	fs.StringVar(&talkideImg, "talkide-image", buildcache.DefaultPromoteImage, "image holding /talkide, which promotes the new generation (the worker's or the control-plane's image)")
	fs.DurationVar(&timeout, "timeout", buildcache.DefaultTimeout, "deadline of the seeding Job (activeDeadlineSeconds), at most "+build.MaxTimeout.String())
	fs.BoolVar(&noWait, "no-wait", false, "return once the Job is created instead of waiting for it")
	fs.StringVar(&b.Image, "build-image", "", "Gradle builder image (required): the build Jobs'")
	fs.StringVar(&b.Claim, "build-claim", build.DefaultClaimName, "the session claim, which holds the seed project (mounted read-only)")
	fs.StringVar(&b.CacheClaim, "build-cache-claim", "", "the cache's ReadWriteMany claim (required): the build Jobs' --build-cache-claim")
	fs.StringToStringVar(&b.NodeSelector, "build-node-selector", nil, "node labels of the build node pool, KEY=VALUE,...")
	fs.StringSliceVar(&b.Tolerations, "build-toleration", nil, "taints the Job tolerates, KEY[=VALUE]:EFFECT; repeat or separate with commas")
	fs.Int64Var(&b.RunAsUser, "build-run-as-user", build.DefaultRunAsUser, "uid and gid of the seeding: the build Jobs' (the cache's files are theirs)")
	fs.StringVar(&b.CPURequest, "build-cpu-request", build.DefaultCPURequest, "CPU request of the Gradle container")
	fs.StringVar(&b.CPULimit, "build-cpu-limit", build.DefaultCPULimit, "CPU limit of the Gradle container")
	fs.StringVar(&b.MemoryRequest, "build-memory-request", build.DefaultMemoryRequest, "memory request of the Gradle container")
	fs.StringVar(&b.MemoryLimit, "build-memory-limit", build.DefaultMemoryLimit, "memory limit of the Gradle container")
	cli.BindEnv(fs, "kubeconfig", "build-image", "build-claim", "build-cache-claim", "build-node-selector", "build-toleration",
		"build-run-as-user", "build-cpu-request", "build-cpu-limit", "build-memory-request", "build-memory-limit")
	return cmd
}

func printSeeding(w io.Writer, r *buildcache.Result) {
	prev := r.Previous
	if prev == "" {
		prev = "none: the first"
	}
	fmt.Fprintf(w, "generation %s is current (previous %s): %d files, %.1f MiB\n", r.Generation, prev, r.Files, float64(r.Bytes)/(1<<20))
	listed := func(what string, ids []string, total int) {
		if total = max(total, len(ids)); total == 0 {
			return
		}
		more := ""
		if total > len(ids) {
			more = fmt.Sprintf(" and %d more", total-len(ids))
		}
		fmt.Fprintf(w, "%s (%d): %s%s\n", what, total, strings.Join(ids, " "), more)
	}
	listed("removed", r.Removed, r.RemovedCount)
	listed("kept for builds that may still read them", r.Kept, r.KeptCount)
	if r.Warning != "" {
		fmt.Fprintf(w, "warning: %s\n", r.Warning)
	}
}

// newAdminBuildCachePromoteCmd is the seeding Job's second step, run in
// its pod: people run seed.
func newAdminBuildCachePromoteCmd(std cli.Stdio) *cobra.Command {
	var root, home, gen, resultFile string
	cmd := &cobra.Command{
		Use:   "promote",
		Short: "The seeding Job's last step: make a seeded Gradle home the current generation of the cache (run in the Job's pod)",
		Long: `Copy the modules a seeding's Gradle downloaded (--gradle-home) into the
generation --generation on the cache (--root), switch the cache's pointer to
it, and remove generations retired longer than the longest build deadline.
The seeding Job runs it once Gradle has succeeded; talkide admin build-cache
seed starts that Job. What it did goes to stdout and, as JSON, to
--result-file (the container's termination message).`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if root == "" || home == "" || gen == "" {
				return errors.New("--root, --gradle-home and --generation are required")
			}
			res, err := buildcache.Promote(root, home, gen, time.Now())
			if resultFile != "" {
				var msg []byte
				if err != nil {
					msg = []byte(err.Error())
				} else {
					msg = res.JSON()
				}
				if werr := os.WriteFile(resultFile, msg, 0o644); werr != nil && err == nil {
					// The generation is current: a failed exit would have
					// the seeding reported as leaving the pointer as it was.
					fmt.Fprintf(std.Err, "talkide: warning: the generation is current, but its report could not be written: %v\n", werr)
				}
			}
			if err != nil {
				return err
			}
			printSeeding(std.Out, res)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&root, "root", "", "the cache claim's mount (required)")
	fs.StringVar(&home, "gradle-home", "", "the Gradle user home the seeding filled (required)")
	fs.StringVar(&gen, "generation", "", "the generation's id (required), as seed chose it")
	fs.StringVar(&resultFile, "result-file", "", "where to write the result as JSON (the seeding Job: its termination message)")
	return cmd
}
