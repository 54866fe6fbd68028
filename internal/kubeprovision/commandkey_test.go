package kubeprovision

import (
	"bytes"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/trust"
)

// A rotated command secret reaches the worker's Secret at the next sync,
// as the newest key with its id in the same file, the identity token
// untouched; the Deployment does not change, so the worker is not
// restarted (it watches the file).
func TestCommandKeyRotationReachesTheSecret(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	ring, err := trust.NewRotatingKeyring([]trust.Key{{ID: "c1", Secret: commandSecret}})
	if err != nil {
		t.Fatal(err)
	}
	cs := shippedClient(t, f.srv)
	p := f.provisioner(cs, &Options{CommandKeys: ring})
	f.sync(t, p)
	secretKey := func() (trust.Key, string) {
		t.Helper()
		sec, err := cs.CoreV1().Secrets(f.ns).Get(ctx, SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k, err := trust.ParseKey(string(sec.Data[provision.KeyCommandKey]), "")
		if err != nil {
			t.Fatalf("the Secret's command key: %v", err)
		}
		if string(sec.Data[provision.KeyCommandKeyID]) != k.ID {
			t.Errorf("command-key-id %q, the key file names %q", sec.Data[provision.KeyCommandKeyID], k.ID)
		}
		return k, string(sec.Data[provision.KeyIdentityToken])
	}
	k1, tok1 := secretKey()
	if k1.ID != "c1" || !bytes.Equal(k1.Secret, trust.DeriveEnvKey(commandSecret, f.tenant, f.env)) {
		t.Fatalf("first key %q is not c1's derived key", k1.ID)
	}
	dep, err := cs.AppsV1().Deployments(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--command-key-id") {
		t.Errorf("the worker's args name a command key id: a rotation would restart it")
	}

	now := f.clk.Now()
	master2 := bytes.Repeat([]byte{0x42}, 32)
	// Published ahead of signing: the control-plane still signs with c1.
	next := trust.Key{ID: "c2", Secret: master2, SignFrom: now.Add(defaultPublishForTest)}
	if err := ring.Set(trust.Rotated(ring.Keys(), next, next.SignFrom.Add(defaultPublishForTest), now)); err != nil {
		t.Fatal(err)
	}
	res := f.sync(t, p)
	if got := actions(res); got["Secret"] != Updated || got["Deployment"] != Unchanged {
		t.Errorf("sync after the rotation: %v, want the Secret updated and the Deployment unchanged", got)
	}
	k2, tok2 := secretKey()
	if k2.ID != "c2" || !bytes.Equal(k2.Secret, trust.DeriveEnvKey(master2, f.tenant, f.env)) {
		t.Errorf("after the rotation the Secret holds %q, want c2's derived key", k2.ID)
	}
	if tok2 != tok1 {
		t.Errorf("the command key rotation replaced the identity token")
	}
}

const defaultPublishForTest = 5 * time.Minute
