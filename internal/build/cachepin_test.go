package build

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// cacheJobContainer returns the build container of a Gradle build's Job
// with or without a cache claim.
func cacheJobContainer(t *testing.T, cacheClaim string, spec Spec) (corev1.Container, corev1.PodSpec) {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "workspaces", "conv1")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, GradleWrapper), []byte("#!/bin/sh\n"), 0o755)
	k, err := NewKubernetes(nil, &KubernetesOptions{Namespace: "acme-dev", VolumeRoot: root, Image: "builder.example.com/jdk:21", CacheClaim: cacheClaim})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Spec: spec, Conversation: "conv1", ToolCall: "toolu_1", Workspace: ws}
	if err := req.Spec.Validate(ws); err != nil {
		t.Fatal(err)
	}
	job, err := k.Job(req)
	if err != nil {
		t.Fatal(err)
	}
	ps := job.Spec.Template.Spec
	return ps.Containers[0], ps
}

// Without a cache there is no shell between the runner and ./gradlew.
func TestBuildWithoutCacheRunsGradleDirectly(t *testing.T) {
	c, ps := cacheJobContainer(t, "", Spec{Tasks: []string{"test"}})
	if got := strings.Join(c.Command, " "); got != "./gradlew --console=plain --no-daemon test" {
		t.Errorf("command = %q", got)
	}
	for _, v := range ps.Volumes {
		if v.Name == "gradle-ro-cache" {
			t.Error("a cache volume without a cache claim")
		}
	}
}

// The build container's own start-up command, run here as the container
// would run it, over a directory standing for the cache claim: the build
// reads the generation the pointer named when it started, even when a
// seeding switches the pointer mid-build, and builds cold (with a note)
// before the first seeding.
func TestBuildPinsTheCacheGenerationAtStart(t *testing.T) {
	c, ps := cacheJobContainer(t, "gradle-cache", Spec{Tasks: []string{"test"}, Args: []string{"--tests", "com.acme.*Test"}})
	var ro bool
	for _, m := range c.VolumeMounts {
		ro = ro || m.Name == "gradle-ro-cache" && m.MountPath == podROCache && m.ReadOnly
	}
	for _, v := range ps.Volumes {
		ro = ro && (v.Name != "gradle-ro-cache" || v.PersistentVolumeClaim.ReadOnly)
	}
	if !ro {
		t.Errorf("the cache claim is not mounted read-only at %s: %+v", podROCache, c.VolumeMounts)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env[CachePointerEnv] != podROCache+"/"+CachePointer {
		t.Fatalf("env = %v", env)
	}

	claim := t.TempDir()
	for _, g := range []string{"gA", "gB"} {
		os.MkdirAll(filepath.Join(claim, "generations", g, "modules-2"), 0o755)
		os.WriteFile(filepath.Join(claim, "generations", g, "modules-2", "which"), []byte(g), 0o644)
	}
	ws := t.TempDir()
	// A stand-in for Gradle: it reads the cache, waits for the test to
	// switch the pointer, reads it again, and prints its arguments.
	gradlew := `#!/bin/sh
echo "cache=${GRADLE_RO_DEP_CACHE-unset}"
[ -n "${GRADLE_RO_DEP_CACHE-}" ] && echo "first=$(cat "$GRADLE_RO_DEP_CACHE/modules-2/which")"
touch started
while [ ! -e switched ]; do sleep 0.01; done
[ -n "${GRADLE_RO_DEP_CACHE-}" ] && echo "second=$(cat "$GRADLE_RO_DEP_CACHE/modules-2/which")"
for a in "$@"; do echo "arg=$a"; done
`
	os.WriteFile(filepath.Join(ws, GradleWrapper), []byte(gradlew), 0o755)
	// A file the model's pattern would match, were a shell to expand it.
	os.WriteFile(filepath.Join(ws, "com.acme.FooTest"), nil, 0o644)

	run := func(switchTo string) (string, string) {
		t.Helper()
		os.Remove(filepath.Join(ws, "started"))
		os.Remove(filepath.Join(ws, "switched"))
		cmd := exec.Command(c.Command[0], c.Command[1:]...)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), CachePointerEnv + "=" + filepath.Join(claim, CachePointer)}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the build did not start: %s %s", stdout.String(), stderr.String())
			}
		}
		if switchTo != "" {
			switchPointer(t, claim, switchTo)
		}
		os.WriteFile(filepath.Join(ws, "switched"), nil, 0o644)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %s", err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	// Before the first seeding: no pointer, no cache, a note.
	out, errOut := run("")
	if !strings.HasPrefix(out, "cache=unset\n") || !strings.Contains(errOut, "no current generation yet") {
		t.Errorf("without a pointer: stdout %q, stderr %q", out, errOut)
	}

	switchPointer(t, claim, "gA")
	out, _ = run("gB")
	want := "cache=" + filepath.Join(claim, "generations", "gA") + "\nfirst=gA\nsecond=gA\n"
	if !strings.HasPrefix(out, want) {
		t.Errorf("a build started on gA, switched mid-build to gB: %q, want it to begin %q", out, want)
	}
	// Its words reach Gradle as they are: no globbing, no splitting.
	var args []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if a, ok := strings.CutPrefix(l, "arg="); ok {
			args = append(args, a)
		}
	}
	if want := []string{"--console=plain", "--no-daemon", "--tests", "com.acme.*Test", "test"}; !slices.Equal(args, want) {
		t.Errorf("gradlew got %q, want %q", args, want)
	}

	// The next build starts on the new generation.
	out, _ = run("")
	if !strings.HasPrefix(out, "cache="+filepath.Join(claim, "generations", "gB")+"\nfirst=gB\nsecond=gB\n") {
		t.Errorf("a build started after the switch: %q", out)
	}
}

// switchPointer points the claim's pointer at a generation the way a
// seeding does: a new symlink renamed over the old one.
func switchPointer(t *testing.T, claim, gen string) {
	t.Helper()
	tmp := filepath.Join(claim, CachePointer+".new")
	os.Remove(tmp)
	if err := os.Symlink(filepath.Join("generations", gen), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(claim, CachePointer)); err != nil {
		t.Fatal(err)
	}
}
