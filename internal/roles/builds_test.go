package roles

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/kubetest"
)

func TestParseTolerations(t *testing.T) {
	got, err := ParseTolerations([]string{"talkide.dev/builds:NoSchedule", "pool=builds:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Operator != corev1.TolerationOpExists || got[0].Key != "talkide.dev/builds" ||
		got[1].Operator != corev1.TolerationOpEqual || got[1].Value != "builds" || got[1].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("parseTolerations = %+v", got)
	}
	for _, bad := range []string{"x", ":NoSchedule", "x:Sometimes"} {
		if _, err := ParseTolerations([]string{bad}); err == nil {
			t.Errorf("ParseTolerations(%q) accepted it", bad)
		}
	}
	if err := (&BuildConfig{Runner: "cloud"}).Check(); err == nil || !strings.Contains(err.Error(), "want local, kubernetes or none") {
		t.Errorf("--builds cloud: %v", err)
	}
}

// The kubernetes runner with a kubeconfig (--kubeconfig), as talkide dev and a worker
// outside the cluster take it: the namespace comes from the kubeconfig's
// context, and a build becomes a Job there (an interrupt deletes it).
func TestKubernetesBuildsFromKubeconfig(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	kubeconfig := kubetest.Kubeconfig(t, srv.Config(), ns)
	dir := t.TempDir()
	o := WorkerConfig{Tenant: "acme", Env: "dev", ClaudeConfigDir: filepath.Join(dir, "claude"), WorkspaceRoot: filepath.Join(dir, "workspaces")}
	flags := BuildConfig{Runner: "kubernetes", Kubeconfig: kubeconfig, Image: "builder.example.com/jdk:21", Claim: build.DefaultClaimName,
		CPURequest: "500m", CPULimit: "3", MemoryRequest: "1Gi", MemoryLimit: "6Gi", MaxConcurrent: build.DefaultMaxConcurrent,
		Timeout: 45 * time.Minute, NodeSelector: map[string]string{"pool": "builds"}, Tolerations: []string{"dedicated=builds:NoSchedule"}}
	if err := flags.Check(); err != nil {
		t.Fatal(err)
	}
	r, err := newBuildRunner(flags, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "kubernetes" {
		t.Fatalf("runner %s", r.Name())
	}
	ws := filepath.Join(o.WorkspaceRoot, "conv1")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "gradlew"), []byte("#!/bin/sh\n"), 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, build.Request{Spec: build.Spec{Tasks: []string{"test"}}, Conversation: "conv1", ToolCall: "toolu_1", Workspace: ws})
		done <- err
	}()
	cs := srv.Client(t)
	name := build.JobName("conv1", "toolu_1")
	for {
		j, err := cs.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if got := j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName; got != "claude-sessions" || j.Spec.Template.Spec.Containers[0].VolumeMounts[0].SubPath != "workspaces/conv1" {
				t.Errorf("the Job mounts %s at subPath %s", got, j.Spec.Template.Spec.Containers[0].VolumeMounts[0].SubPath)
			}
			// The flags' resources, deadline and node pool, as the API
			// server stored them.
			res := j.Spec.Template.Spec.Containers[0].Resources
			for name, want := range map[string]struct{ got, want string }{
				"cpu request":    {res.Requests.Cpu().String(), "500m"},
				"cpu limit":      {res.Limits.Cpu().String(), "3"},
				"memory request": {res.Requests.Memory().String(), "1Gi"},
				"memory limit":   {res.Limits.Memory().String(), "6Gi"},
			} {
				if want.got != want.want {
					t.Errorf("the Job's %s is %s, want %s", name, want.got, want.want)
				}
			}
			if d := j.Spec.ActiveDeadlineSeconds; d == nil || *d != 45*60 {
				t.Errorf("the Job's activeDeadlineSeconds = %v, want 2700", d)
			}
			pod := j.Spec.Template.Spec
			if pod.NodeSelector["pool"] != "builds" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" ||
				pod.Tolerations[0].Value != "builds" || pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("the Job's node selector %v, tolerations %+v", pod.NodeSelector, pod.Tolerations)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run ended before creating its Job: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after the interrupt = %v", err)
	}
	if _, err := cs.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Job outlived the interrupt: %v", err)
	}

	// Workspaces the build Jobs could not mount refuse the start.
	o.WorkspaceRoot = t.TempDir()
	if _, err := newBuildRunner(flags, o, nil); err == nil || !strings.Contains(err.Error(), "not below the mount") {
		t.Errorf("workspaces off the session volume: %v", err)
	}
	flags.Kubeconfig = filepath.Join(dir, "missing")
	if _, err := newBuildRunner(flags, o, nil); err == nil {
		t.Error("a missing kubeconfig was accepted")
	}
}
