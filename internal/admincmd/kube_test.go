package admincmd

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/roles/rolestest"
)

// kubeconfig writes a kubeconfig file for the test API server's
// administrator.
func kubeconfig(t *testing.T, srv *kubetest.Server) string {
	t.Helper()
	c := srv.Config()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData, Token: c.BearerToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// The admin commands drive the provisioner: sync creates and then keeps,
// status shows, rotate rotates, delete revokes and deletes.
func TestAdminKubernetes(t *testing.T) {
	srv := kubetest.Start(t)
	dir, _ := rolestest.NewControlPlaneDir(t)
	var b [3]byte
	rand.Read(b[:])
	tenant := "k" + hex.EncodeToString(b[:])
	ns := tenant + "-prod"
	d, kc := "--data-dir="+dir, "--kubeconfig="+kubeconfig(t, srv)
	// The same object flags on every call, as the control-plane's
	// environment gives them: a claim's class cannot change.
	te := []string{"--tenant", tenant, "--env", "prod", "--sessions-storage-class", "nfs"}
	mustAdmin(t, "env", "add", d, "--worker-url", "http://placeholder:8080", "--tenant", tenant, "--env", "prod")

	out, _ := mustAdmin(t, append([]string{"env", "sync", d, kc}, te...)...)
	for _, want := range []string{"Namespace", ns + "/talkide-worker", "created", "identity token"} {
		if !strings.Contains(out, want) {
			t.Errorf("first sync printed no %q:\n%s", want, out)
		}
	}
	out, _ = mustAdmin(t, append([]string{"env", "sync", d, kc}, te...)...)
	if !strings.Contains(out, "nothing changed") || strings.Contains(out, "created") {
		t.Errorf("second sync:\n%s", out)
	}
	out, _ = mustAdmin(t, append([]string{"env", "status", d, kc}, te...)...)
	if !strings.Contains(out, "Deployment") || !strings.Contains(out, "worker ready: false") {
		t.Errorf("status:\n%s", out)
	}
	out, _ = mustAdmin(t, append([]string{"token", "rotate", d, kc, "--grace", "1m"}, te...)...)
	if !strings.Contains(out, "stays valid until") {
		t.Errorf("rotate:\n%s", out)
	}
	if _, _, err := admin(t, append([]string{"token", "rotate", d, kc, "--grace", "-1m"}, te...)...); err == nil {
		t.Error("a negative grace was accepted")
	}
	if _, _, err := admin(t, "env", "sync", d, kc, "--tenant", "../x", "--env", "prod"); err == nil {
		t.Error("a bad tenant name was accepted")
	}
	out, _ = mustAdmin(t, append([]string{"env", "delete", d, kc, "--keep-sessions"}, te...)...)
	if !strings.Contains(out, "revoked 2 identity token(s)") || !strings.Contains(out, "kept namespace") {
		t.Errorf("delete --keep-sessions:\n%s", out)
	}
	if _, err := srv.Client(t).CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "claude-sessions", metav1.GetOptions{}); err != nil {
		t.Errorf("the claim is gone: %v", err)
	}
	if _, _, err := admin(t, append([]string{"env", "sync", d, kc}, te...)...); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("sync of a retired env: %v", err)
	}
}
