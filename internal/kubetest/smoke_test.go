package kubetest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
)

// The things the provisioner and the build runner do, once each, against
// the real API server: what this harness is for.
func TestSmoke(t *testing.T) {
	srv := Start(t)
	ctx := t.Context()
	admin := srv.Client(t)
	ns := srv.Namespace(t)

	// A ServiceAccount that may read ConfigMaps in its namespace, and no more.
	const sa = "builder"
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount: %v", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role: %v", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "builder-reads-configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding: %v", err)
	}

	t.Run("server-side apply", func(t *testing.T) {
		const manager = "talkide-provisioner"
		apply := func(manager string, force bool, data map[string]string) (*corev1.ConfigMap, error) {
			cm := corev1ac.ConfigMap("settings", ns).WithData(data)
			return admin.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: manager, Force: force})
		}
		if _, err := apply(manager, true, map[string]string{"a": "1", "b": "2"}); err != nil {
			t.Fatalf("apply: %v", err)
		}
		got, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if diff := cmp.Diff(map[string]string{"a": "1", "b": "2"}, got.Data); diff != "" {
			t.Errorf("data (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"f:a", "f:b"}, ownedData(t, got, manager)); diff != "" {
			t.Errorf("fields %s owns under data (-want +got):\n%s", manager, diff)
		}

		// Another manager may not take a field over without forcing.
		if _, err := apply("someone-else", false, map[string]string{"a": "changed"}); !apierrors.IsConflict(err) {
			t.Errorf("apply of an owned field by another manager: err = %v, want a conflict", err)
		}
		// A field the manager stops applying is removed.
		got, err = apply(manager, true, map[string]string{"a": "1"})
		if err != nil {
			t.Fatalf("second apply: %v", err)
		}
		if diff := cmp.Diff(map[string]string{"a": "1"}, got.Data); diff != "" {
			t.Errorf("data after dropping b (-want +got):\n%s", diff)
		}
	})

	t.Run("access review", func(t *testing.T) {
		tests := map[string]struct {
			attrs authorizationv1.ResourceAttributes
			want  bool
		}{
			"get configmaps here":   {authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "configmaps"}, true},
			"watch configmaps here": {authorizationv1.ResourceAttributes{Namespace: ns, Verb: "watch", Resource: "configmaps"}, true},
			"delete configmaps":     {authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Resource: "configmaps"}, false},
			"get secrets":           {authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"}, false},
			"configmaps elsewhere":  {authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "configmaps"}, false},
			"create jobs":           {authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "batch", Resource: "jobs"}, false},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               ServiceAccountUser(ns, sa),
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
					ResourceAttributes: &tc.attrs,
				}}
				got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("SubjectAccessReview: %v", err)
				}
				if got.Status.Allowed != tc.want {
					t.Errorf("allowed = %v, want %v (%s)", got.Status.Allowed, tc.want, got.Status.Reason)
				}
			})
		}
	})

	// The same account's requests, by impersonation and with its own token.
	t.Run("as the ServiceAccount", func(t *testing.T) {
		configs := map[string]*kubernetes.Clientset{
			"impersonated": NewClient(t, srv.AsServiceAccount(ns, sa)),
			"token":        NewClient(t, srv.ServiceAccountToken(t, ns, sa)),
		}
		for name, cs := range configs {
			t.Run(name, func(t *testing.T) {
				if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil {
					t.Errorf("get its namespace's ConfigMap: %v", err)
				}
				if _, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("list Secrets: err = %v, want forbidden", err)
				}
				if _, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("list another namespace's ConfigMaps: err = %v, want forbidden", err)
				}
				review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("SelfSubjectReview: %v", err)
				}
				if got, want := review.Status.UserInfo.Username, ServiceAccountUser(ns, sa); got != want {
					t.Errorf("authenticated as %q, want %q", got, want)
				}
			})
		}
	})

	// No Job controller runs: the test plays it, writing the status a
	// finished Job gets, and a watch sees it.
	t.Run("job", func(t *testing.T) {
		job := newJob("build-1")
		created, err := admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create Job: %v", err)
		}
		w, err := admin.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{
			FieldSelector:   "metadata.name=" + job.Name,
			ResourceVersion: created.ResourceVersion,
		})
		if err != nil {
			t.Fatalf("watch Jobs: %v", err)
		}
		defer w.Stop()

		CompleteJob(t, admin, created)

		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for done := false; !done; {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("watch ended before the Job was seen complete")
				}
				if ev.Type != watch.Modified {
					t.Fatalf("watch event %s, want %s: %+v", ev.Type, watch.Modified, ev.Object)
				}
				done = jobFinished(ev.Object.(*batchv1.Job)) == batchv1.JobComplete
			case <-wctx.Done():
				t.Fatal("the watch saw no complete Job within 30s")
			}
		}
	})
}

// The build runner's other half: the pods of a Job and their logs. No Job
// controller makes the pods and no kubelet runs them, so the test creates
// the pod on a stand-in node, writes its status, and serves its logs.
func TestPodsAndLogs(t *testing.T) {
	srv := Start(t)
	ctx := t.Context()
	admin := srv.Client(t)
	ns := srv.Namespace(t)

	release := make(chan struct{})
	kubelet := http.NewServeMux()
	kubelet.HandleFunc(ContainerLogsPattern, func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("namespace") != ns || r.PathValue("pod") != "build-1-abcde" || r.PathValue("container") != "build" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "step 1: ok\n")
		if r.URL.Query().Get("follow") != "true" {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
			io.WriteString(w, "step 2: ok\n")
		case <-r.Context().Done():
		}
	})
	node := srv.Node(t, kubelet)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "build-1-abcde", Labels: map[string]string{"batch.kubernetes.io/job-name": "build-1"}},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "build", Image: "builder:test"}},
		},
	}
	created, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Pod: %v", err)
	}
	created.Status.Phase = corev1.PodSucceeded
	if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the Pod's status: %v", err)
	}
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=build-1"})
	if err != nil {
		t.Fatalf("list the Job's pods: %v", err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodSucceeded {
		t.Fatalf("the Job's pods: %+v, want build-1-abcde, Succeeded", pods.Items)
	}

	logs, err := admin.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "build"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("get logs: %v", err)
	}
	if got, want := string(logs), "step 1: ok\n"; got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}

	// A followed log arrives as it is written, not when it ends.
	stream, err := admin.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "build", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("follow logs: %v", err)
	}
	defer stream.Close()
	r := bufio.NewReader(stream)
	if line, err := r.ReadString('\n'); err != nil || line != "step 1: ok\n" {
		t.Fatalf("first followed line = %q, %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "step 2: ok\n" {
		t.Errorf("rest of the followed log = %q, %v; want %q", rest, err, "step 2: ok\n")
	}

	// The kubelet's own errors reach the client.
	if _, err := admin.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "other"}).DoRaw(ctx); err == nil {
		t.Error("logs of a container the kubelet does not know: no error")
	}
	// A pod on no node yet has empty logs, as in a real cluster.
	unscheduled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "build", Image: "builder:test"}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, unscheduled, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Pod: %v", err)
	}
	if logs, err := admin.CoreV1().Pods(ns).GetLogs("pending", &corev1.PodLogOptions{}).DoRaw(ctx); err != nil || len(logs) != 0 {
		t.Errorf("logs of a pod on no node = %q, %v; want none and no error", logs, err)
	}
}

func TestFinishJob(t *testing.T) {
	srv := Start(t)
	ctx := t.Context()
	admin := srv.Client(t)
	ns := srv.Namespace(t)
	tests := map[string]struct {
		finish func(testing.TB, kubernetes.Interface, *batchv1.Job) *batchv1.Job
		want   batchv1.JobConditionType
	}{
		"complete": {CompleteJob, batchv1.JobComplete},
		"fail":     {FailJob, batchv1.JobFailed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			job, err := admin.BatchV1().Jobs(ns).Create(ctx, newJob(name), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create Job: %v", err)
			}
			if got := jobFinished(job); got != "" {
				t.Fatalf("a new Job is finished: %s", got)
			}
			tc.finish(t, admin, job)
			got, err := admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get Job: %v", err)
			}
			if f := jobFinished(got); f != tc.want {
				t.Errorf("Job finished as %q, want %q: %+v", f, tc.want, got.Status)
			}
			if got.Status.StartTime == nil {
				t.Error("no startTime")
			}
			if (got.Status.CompletionTime != nil) != (tc.want == batchv1.JobComplete) {
				t.Errorf("completionTime = %v for a Job that finished as %s", got.Status.CompletionTime, tc.want)
			}
		})
	}
}

// A Job's pod as RunJobPod makes it is what the Job controller would
// make: found by the Job's label, owned by the Job, on the node, with the
// status the test gave it; SetPodStatus changes that status afresh.
func TestJobPod(t *testing.T) {
	srv := Start(t)
	ctx := t.Context()
	admin := srv.Client(t)
	ns := srv.Namespace(t)
	node := srv.Node(t, nil)
	job, err := admin.BatchV1().Jobs(ns).Create(ctx, newJob("with-pod"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Job: %v", err)
	}
	pod := RunJobPod(t, admin, job, "with-pod-a1", node, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
	if err != nil {
		t.Fatalf("list the Job's pods: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != pod.Name {
		t.Fatalf("the Job's label finds %d pods, want %s alone", len(list.Items), pod.Name)
	}
	got := list.Items[0]
	if owner := metav1.GetControllerOf(&got); owner == nil || owner.UID != job.UID {
		t.Errorf("controller = %+v, want the Job %s", owner, job.UID)
	}
	if got.Spec.NodeName != node || got.Status.Phase != corev1.PodRunning {
		t.Errorf("pod on %q, %s; want on %q, Running", got.Spec.NodeName, got.Status.Phase, node)
	}
	if got.Spec.Containers[0].Image != job.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("image %q, not the Job template's", got.Spec.Containers[0].Image)
	}

	SetPodStatus(t, admin, pod, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	after, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	if after.Status.Phase != corev1.PodSucceeded {
		t.Errorf("phase %s after SetPodStatus, want Succeeded", after.Status.Phase)
	}
}

func newJob(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "build", Image: "builder:test", Command: []string{"true"}}},
		}}},
	}
}

func TestUsers(t *testing.T) {
	srv := Start(t)
	ctx := t.Context()
	ns := srv.Namespace(t)
	if _, err := srv.Client(t).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}

	nobody := srv.User(t, nil)
	reader := srv.User(t, &UserOptions{Name: "reader", Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}},
	}})
	// The built-in view, edit and admin roles are aggregated from the
	// system:aggregate-to-* ones by a controller that does not run here:
	// they are empty, and binding the parts is what works.
	viewer := srv.User(t, &UserOptions{Name: "viewer", Groups: []string{"talkide:ops"}, ClusterRoles: []string{"system:aggregate-to-view"}})
	emptyView := srv.User(t, &UserOptions{Name: "empty-view", ClusterRoles: []string{"view"}})
	admin := srv.User(t, &UserOptions{Name: "admin", ClusterRoles: []string{"cluster-admin"}})

	listCM := func(cs *kubernetes.Clientset) error {
		_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return err
	}
	listSecrets := func(cs *kubernetes.Clientset) error {
		_, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		return err
	}
	createCM := func(cs *kubernetes.Clientset) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}}, metav1.CreateOptions{})
		return err
	}
	tests := map[string]struct {
		user    *User
		call    func(*kubernetes.Clientset) error
		allowed bool
	}{
		"nobody lists ConfigMaps":  {nobody, listCM, false},
		"reader lists ConfigMaps":  {reader, listCM, true},
		"reader lists Secrets":     {reader, listSecrets, false},
		"reader creates ConfigMap": {reader, createCM, false},
		"viewer lists ConfigMaps":  {viewer, listCM, true},
		// The built-in view role leaves Secrets out.
		"viewer lists Secrets":      {viewer, listSecrets, false},
		"viewer creates ConfigMaps": {viewer, createCM, false},
		"view is empty here":        {emptyView, listCM, false},
		"cluster-admin lists":       {admin, listSecrets, true},
		"cluster-admin creates":     {admin, createCM, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.call(NewClient(t, tc.user.Config))
			switch {
			case tc.allowed && err != nil:
				t.Errorf("err = %v, want none", err)
			case !tc.allowed && !apierrors.IsForbidden(err):
				t.Errorf("err = %v, want forbidden", err)
			}
		})
	}

	review, err := NewClient(t, viewer.Config).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	want := authenticationv1.UserInfo{Username: viewer.Name, Groups: []string{"talkide:ops", "system:authenticated"}}
	// Extra holds the certificate's fingerprint.
	if diff := cmp.Diff(want, review.Status.UserInfo, cmpopts.IgnoreFields(authenticationv1.UserInfo{}, "Extra")); diff != "" {
		t.Errorf("viewer's identity (-want +got):\n%s", diff)
	}
	names := map[string]bool{}
	for _, u := range []*User{nobody, reader, viewer, emptyView, admin} {
		if names[u.Name] {
			t.Errorf("user name %q given twice", u.Name)
		}
		names[u.Name] = true
	}
}

// As in a real cluster, there is no token for a ServiceAccount that does
// not exist.
func TestServiceAccountTokenNeedsTheAccount(t *testing.T) {
	srv := Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	_, err := srv.Client(t).CoreV1().ServiceAccounts(ns).CreateToken(ctx, "missing", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("TokenRequest for a missing ServiceAccount: err = %v, want not found", err)
	}
}

// ownedData returns the fields under data that manager owns by apply.
func ownedData(t *testing.T, cm *corev1.ConfigMap, manager string) []string {
	t.Helper()
	for _, mf := range cm.ManagedFields {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply {
			continue
		}
		var fields map[string]map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			t.Fatalf("managedFields of %s: %v", manager, err)
		}
		var keys []string
		for k := range fields["f:data"] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return keys
	}
	t.Fatalf("no managedFields entry applied by %s: %+v", manager, cm.ManagedFields)
	return nil
}
