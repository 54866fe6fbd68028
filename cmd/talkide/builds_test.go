package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/sandbox"
)

// Mara runs the workspace's build with the Build tool in talkide dev (the
// local runner, the model simulator driving): the log streams to the chat
// and the test summary reaches the model and the chat.
func TestBuildToolInDev(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.info.ControlPlane
	conv := createConversation(t, base).ID
	ws := filepath.Join(st.info.Workspaces, conv)
	b, err := os.ReadFile("../../internal/build/testdata/fakegradle/gradlew")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "gradlew"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	evs := turn(t, base, conv, `Run the tests. [[tool:Build {"tasks": ["failing"]}]]`)
	if end := terminal(t, evs); end.Kind != contract.KindTurnFinished {
		t.Fatalf("turn: %s %+v", end.Kind, end.Failure)
	}
	var live, final strings.Builder
	for _, s := range evs {
		switch s.ev.Kind {
		case contract.KindToolOutput:
			live.WriteString(s.ev.Tool.Output)
		case contract.KindMessage:
			final.Reset()
			final.WriteString(s.ev.Text)
		}
	}
	if !strings.Contains(live.String(), "FailTest > breaks() FAILED") {
		t.Errorf("the build's log did not stream: %q", live.String())
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
	if !strings.Contains(final.String(), "Build FAILED") {
		t.Errorf("the model's reply does not quote the build result: %q", final.String())
	}
}

func TestParseTolerations(t *testing.T) {
	got, err := parseTolerations([]string{"talkide.dev/builds:NoSchedule", "pool=builds:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Operator != corev1.TolerationOpExists || got[0].Key != "talkide.dev/builds" ||
		got[1].Operator != corev1.TolerationOpEqual || got[1].Value != "builds" || got[1].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("parseTolerations = %+v", got)
	}
	for _, bad := range []string{"x", ":NoSchedule", "x:Sometimes"} {
		if _, err := parseTolerations([]string{bad}); err == nil {
			t.Errorf("parseTolerations(%q) accepted it", bad)
		}
	}
	if err := (&buildFlags{runner: "cloud"}).check(); err == nil || !strings.Contains(err.Error(), "want local, kubernetes or none") {
		t.Errorf("--builds cloud: %v", err)
	}
}

// --builds kubernetes with --kubeconfig, as talkide dev and a worker
// outside the cluster take it: the namespace comes from the kubeconfig's
// context, and a build becomes a Job there (an interrupt deletes it).
func TestKubernetesBuildsFromKubeconfig(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	admin := srv.Config()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: admin.CertData, ClientKeyData: admin.KeyData}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: ns}
	cfg.CurrentContext = "test"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	o := workerOptions{tenant: "acme", env: "dev", claudeConfigDir: filepath.Join(dir, "claude"), workspaceRoot: filepath.Join(dir, "workspaces")}
	flags := parsedBuildFlags(t, "--builds", "kubernetes", "--kubeconfig", kubeconfig, "--build-image", "builder.example.com/jdk:21",
		"--build-cpu-request", "500m", "--build-cpu-limit", "3", "--build-memory-request", "1Gi", "--build-memory-limit", "6Gi",
		"--build-timeout", "45m", "--build-node-selector", "pool=builds", "--build-toleration", "dedicated=builds:NoSchedule")
	r, err := newBuildRunner(flags, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "kubernetes" {
		t.Fatalf("runner %s", r.Name())
	}
	ws := filepath.Join(o.workspaceRoot, "conv1")
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
	o.workspaceRoot = t.TempDir()
	if _, err := newBuildRunner(flags, o, nil); err == nil || !strings.Contains(err.Error(), "not below the mount") {
		t.Errorf("workspaces off the session volume: %v", err)
	}
	flags.kubeconfig = filepath.Join(dir, "missing")
	if _, err := newBuildRunner(flags, o, nil); err == nil {
		t.Error("a missing kubeconfig was accepted")
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
	admin := srv.Config()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	sa := srv.AsServiceAccount(ns, "talkide-worker")
	cfg.AuthInfos["worker"] = &clientcmdapi.AuthInfo{ClientCertificateData: admin.CertData, ClientKeyData: admin.KeyData,
		Impersonate: sa.Impersonate.UserName, ImpersonateGroups: sa.Impersonate.Groups}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "worker", Namespace: ns}
	cfg.CurrentContext = "test"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	// The stand-in kubelet serves the build container's log.
	line := time.Now().UTC().Format(time.RFC3339Nano) + " OkTest > one() PASSED\n"
	kubelet := http.NewServeMux()
	kubelet.HandleFunc(kubetest.ContainerLogsPattern, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, line) })
	node := srv.Node(t, kubelet)

	st, err := startDev(ctx, devConfig{dataDir: filepath.Join(dir, "data"), addr: "127.0.0.1:0", logger: slog.New(slog.DiscardHandler),
		agent: agentFlags{builds: buildFlags{runner: "kubernetes", kubeconfig: kubeconfig, image: "builder.example.com/jdk:21", claim: "claude-sessions"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st.shutdown(sctx)
	})
	base := st.info.ControlPlane
	conv := createConversation(t, base).ID
	ws := filepath.Join(st.info.Workspaces, conv)
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
	if end := terminal(t, evs); end.Kind != contract.KindTurnFinished {
		t.Fatalf("turn: %s %+v", end.Kind, end.Failure)
	}
	var live, final strings.Builder
	for _, s := range evs {
		switch s.ev.Kind {
		case contract.KindToolOutput:
			live.WriteString(s.ev.Tool.Output)
		case contract.KindMessage:
			final.Reset()
			final.WriteString(s.ev.Text)
		}
	}
	if live.String() != "OkTest > one() PASSED\n" {
		t.Errorf("live output = %q", live.String())
	}
	tools := finished(evs)
	if len(tools) != 1 || tools[0].IsError || !strings.Contains(tools[0].Output, "Build succeeded: ./gradlew test (exit status 0, ") ||
		!strings.Contains(tools[0].Output, "Job "+ns+"/"+job.Name) || !strings.Contains(tools[0].Output, "Tests: 1 run, 1 passed") {
		t.Fatalf("tool.finished = %+v", tools)
	}
	if !strings.Contains(final.String(), "Build succeeded") {
		t.Errorf("the model's reply does not quote the result: %q", final.String())
	}
	if _, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the finished build's Job is still there: %v", err)
	}
}

// parsedBuildFlags parses args as talkide worker's build flags, with
// their defaults, and checks them.
func parsedBuildFlags(t *testing.T, args ...string) buildFlags {
	t.Helper()
	var b buildFlags
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	registerBuildFlags(fs, &b)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
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
		var b buildFlags
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		registerBuildFlags(fs, &b)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := b.check()
		var fe *contract.FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(args[0], "--"+fe.Field) {
			t.Errorf("%v: %v, want a field error about %s", args, err, args[0])
		}
	}
	b := parsedBuildFlags(t, "--build-local-memory", "6Gi", "--build-local-procs", "512", "--build-local-cpu-time", "1h", "--build-local-file-size", "2Gi")
	l, err := b.localLimits()
	if err != nil || l.MaxMemory != 6<<30 || l.MaxProcs != 512 || l.MaxCPU != time.Hour || l.MaxFileSize != 2<<30 {
		t.Errorf("local limits %+v, %v", l, err)
	}
	def := parsedBuildFlags(t)
	if l, err := def.localLimits(); err != nil || l != (sandbox.Limits{}) {
		t.Errorf("default local limits %+v, %v: want the jail's", l, err)
	}
}
