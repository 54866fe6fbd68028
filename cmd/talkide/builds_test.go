package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/build/buildtest"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sandbox"
)

// buildTurn checks that a turn with a build finished, and returns the
// build's log as it streamed and the model's last reply.
func buildTurn(t *testing.T, evs []streamed) (log, reply string) {
	t.Helper()
	if end := terminal(t, evs); end.Kind != contract.KindTurnFinished {
		t.Fatalf("turn: %s %+v", end.Kind, end.Failure)
	}
	var live strings.Builder
	for _, s := range evs {
		switch s.ev.Kind {
		case contract.KindToolOutput:
			live.WriteString(s.ev.Tool.Output)
		case contract.KindMessage:
			reply = s.ev.Text
		}
	}
	return live.String(), reply
}

// Mara runs the workspace's build with the Build tool in talkide dev (the
// local runner, the model simulator driving): the log streams to the chat
// and the test summary reaches the model and the chat.
func TestBuildToolInDev(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	conv := createConversation(t, base).ID
	ws := filepath.Join(st.Info.Workspaces, conv)
	buildtest.FakeGradle(t, ws)
	evs := turn(t, base, conv, `Run the tests. [[tool:Build {"tasks": ["failing"]}]]`)
	live, final := buildTurn(t, evs)
	if !strings.Contains(live, "FailTest > breaks() FAILED") {
		t.Errorf("the build's log did not stream: %q", live)
	}
	tools := finished(evs)
	if len(tools) != 1 || tools[0].Name != "Build" || !tools[0].IsError {
		t.Fatalf("tool.finished = %+v", tools)
	}
	for _, s := range []string{"Build FAILED: ./gradlew failing (exit status 1", "Tests: 2 run, 1 passed, 1 failed", "com.acme.FailTest > breaks() (failed)"} {
		if !strings.Contains(tools[0].Output, s) {
			t.Errorf("the result lacks %q:\n%s", s, tools[0].Output)
		}
	}
	// The simulator quotes the tool result it was given: the model saw it.
	if !strings.Contains(final, "Build FAILED") {
		t.Errorf("the model's reply does not quote the build result: %q", final)
	}
}

// Mara's Build in talkide dev --builds kubernetes, against the test API
// server as a ServiceAccount holding exactly the worker's Role: the
// simulator calls Build, exactly one Job is created; the test plays the
// Job controller and the kubelet (a pod that ran, its log, the Job's
// status) and the summary reaches the model and the chat.
func TestBuildToolInDevOnKubernetes(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	cs := srv.Client(t)
	ctx := context.Background()
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "talkide-worker"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "talkide-worker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "talkide-worker", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{Kind: "Role", APIGroup: rbacv1.GroupName, Name: "talkide-worker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := kubetest.Kubeconfig(t, srv.AsServiceAccount(ns, "talkide-worker"), ns)
	dir := t.TempDir()

	// The stand-in kubelet serves the build container's log.
	line := time.Now().UTC().Format(time.RFC3339Nano) + " OkTest > one() PASSED\n"
	kubelet := http.NewServeMux()
	kubelet.HandleFunc(kubetest.ContainerLogsPattern, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, line) })
	node := srv.Node(t, kubelet)

	st := startDevT(t, roles.DevConfig{DataDir: filepath.Join(dir, "data"),
		Agent: roles.AgentConfig{Builds: roles.BuildConfig{Runner: "kubernetes", Kubeconfig: kubeconfig, Image: "builder.example.com/jdk:21", Claim: "claude-sessions"}}})
	base := st.Info.ControlPlane
	conv := createConversation(t, base).ID
	ws := filepath.Join(st.Info.Workspaces, conv)
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "gradlew"), []byte("#!/bin/sh\n"), 0o755)

	var state contractView
	api(t, http.MethodGet, base+"/api/conversations/"+conv, nil, &state)
	r := send(t, base, conv, `[[tool:Build {"tasks": ["test"]}]]`)

	// Play the Job controller and the kubelet.
	var job *batchv1.Job
	for job == nil {
		list, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "talkide.dev/conversation=" + conv})
		if err != nil {
			t.Fatal(err)
		}
		switch len(list.Items) {
		case 0:
			time.Sleep(20 * time.Millisecond)
		case 1:
			job = &list.Items[0]
		default:
			t.Fatalf("%d Jobs for one Build call", len(list.Items))
		}
	}
	spec := *job.Spec.Template.Spec.DeepCopy()
	spec.NodeName = node
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-p1",
		Labels: map[string]string{"batch.kubernetes.io/job-name": job.Name}}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(ws, "build/test-results/test"), 0o755)
	os.WriteFile(filepath.Join(ws, "build/test-results/test/TEST-OkTest.xml"), []byte(`<testsuite><testcase classname="OkTest" name="one()"/></testsuite>`), 0o644)
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: build.ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.CompleteJob(t, cs, job)

	evs := readStream(t, base, conv, state.State.LastSeq, turnEnded(r.TurnID))
	live, final := buildTurn(t, evs)
	if live != "OkTest > one() PASSED\n" {
		t.Errorf("live output = %q", live)
	}
	tools := finished(evs)
	if len(tools) != 1 || tools[0].IsError || !strings.Contains(tools[0].Output, "Build succeeded: ./gradlew test (exit status 0, ") ||
		!strings.Contains(tools[0].Output, "Job "+ns+"/"+job.Name) || !strings.Contains(tools[0].Output, "Tests: 1 run, 1 passed") {
		t.Fatalf("tool.finished = %+v", tools)
	}
	if !strings.Contains(final, "Build succeeded") {
		t.Errorf("the model's reply does not quote the result: %q", final)
	}
	if _, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the finished build's Job is still there: %v", err)
	}
}

// parsedBuildFlags parses args as talkide worker's build flags, with
// their defaults, and checks them.
func parsedBuildFlags(t *testing.T, args ...string) roles.BuildConfig {
	t.Helper()
	var b roles.BuildConfig
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	registerBuildFlags(fs, &b)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	return b
}

// Bad build limits are refused at start, naming the flag.
func TestBuildLimitFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--build-cpu-request", "lots"},
		{"--build-cpu-limit", "0"},
		{"--build-memory-request", "-1Gi"},
		{"--build-cpu-request", "4", "--build-cpu-limit", "2"},
		{"--build-memory-request", "8Gi"},
		{"--build-timeout", "3h"},
		{"--build-timeout", "-1s"},
		{"--build-local-memory", "12"},
		{"--build-local-memory", "much"},
		{"--build-local-file-size", "1k"},
		{"--build-local-procs", "-1"},
		{"--build-local-cpu-time", "10ms"},
	} {
		var b roles.BuildConfig
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		registerBuildFlags(fs, &b)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := b.Check()
		var fe *contract.FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(args[0], "--"+fe.Field) {
			t.Errorf("%v: %v, want a field error about %s", args, err, args[0])
		}
	}
	b := parsedBuildFlags(t, "--build-local-memory", "6Gi", "--build-local-procs", "512", "--build-local-cpu-time", "1h", "--build-local-file-size", "2Gi")
	l, err := b.LocalLimits()
	if err != nil || l.MaxMemory != 6<<30 || l.MaxProcs != 512 || l.MaxCPU != time.Hour || l.MaxFileSize != 2<<30 {
		t.Errorf("local limits %+v, %v", l, err)
	}
	def := parsedBuildFlags(t)
	if l, err := def.LocalLimits(); err != nil || l != (sandbox.Limits{}) {
		t.Errorf("default local limits %+v, %v: want the jail's", l, err)
	}
}
