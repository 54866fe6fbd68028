package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/talkide/platform/internal/defaults"
)

// callTimeout bounds each API call the helpers make.
const callTimeout = 30 * time.Second

// Namespace creates a namespace of its own for t, named after the test with
// a random suffix, and returns its name. Nothing deletes it: without the
// namespace controller a deleted namespace would stay Terminating anyway,
// and the whole server goes when the package's tests end.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	name := uniqueName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := s.Client(t).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// UserOptions says who a User is and what RBAC lets it do. The zero value
// is a user with no permissions beyond those of every authenticated user
// (discovery, self reviews).
type UserOptions struct {
	// Name is the start of the user's name; a random suffix makes it unique
	// on the shared server. Default "user".
	Name string
	// Groups the user belongs to, besides system:authenticated.
	Groups []string
	// ClusterRoles are bound to the user cluster-wide, e.g. the built-in
	// "view", "edit", "admin" or "cluster-admin".
	ClusterRoles []string
	// Rules, when any, go into a new ClusterRole bound to the user
	// cluster-wide.
	Rules []rbacv1.PolicyRule
}

// User is an authenticated user of the server (a client certificate).
type User struct {
	// Name is the user's name, as RBAC subjects and audit see it.
	Name string
	// Groups are the groups its certificate names.
	Groups []string
	// Config authenticates as the user. Copy it before changing it.
	Config *rest.Config
}

// User creates a user with the permissions opts gives (none when nil) and
// returns it. The ClusterRole and bindings it makes are named kubetest-
// and the user's name; nothing deletes them.
func (s *Server) User(t testing.TB, opts *UserOptions) *User {
	t.Helper()
	o := defaults.Copy(opts)
	if o.Name == "" {
		o.Name = "user"
	}
	name := uniqueName(o.Name)
	au, err := s.env.AddUser(envtest.User{Name: name, Groups: o.Groups}, &rest.Config{QPS: s.admin.QPS, Burst: s.admin.Burst})
	if err != nil {
		t.Fatalf("add user %s: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs := s.Client(t)
	roles := o.ClusterRoles
	if len(o.Rules) > 0 {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-" + name}, Rules: o.Rules}
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ClusterRole for user %s: %v", name, err)
		}
		roles = append(roles[:len(roles):len(roles)], cr.Name)
	}
	for _, role := range roles {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubetest-" + name + "-" + role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
			RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", APIGroup: rbacv1.GroupName, Name: role},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bind ClusterRole %s to user %s: %v", role, name, err)
		}
	}
	return &User{Name: name, Groups: o.Groups, Config: au.Config()}
}

// ServiceAccountUser returns the user name Kubernetes gives a ServiceAccount.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// AsServiceAccount returns a config that acts as the ServiceAccount
// namespace/name by impersonation: the administrator authenticates, RBAC
// then judges each request as the account, with the groups a real token
// would carry. The account need not exist. For its real credentials, see
// ServiceAccountToken.
func (s *Server) AsServiceAccount(namespace, name string) *rest.Config {
	cfg := s.Config()
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: ServiceAccountUser(namespace, name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}

// ServiceAccountToken returns a config that authenticates with a token of
// the ServiceAccount namespace/name, got by a TokenRequest as a pod's token
// is; the account must exist. The token is valid for an hour.
func (s *Server) ServiceAccountToken(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	hour := int64(time.Hour / time.Second)
	tr, err := s.Client(t).CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	// Only the server's address and CA come from the admin's config, never
	// its client certificate.
	return &rest.Config{
		Host:            s.admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.admin.CAData},
		BearerToken:     tr.Status.Token,
		QPS:             s.admin.QPS,
		Burst:           s.admin.Burst,
	}
}

// uniqueName turns s into a DNS-1123 label with a random suffix: usable as
// a namespace, an object's or a user's name.
func uniqueName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	var suffix [3]byte
	rand.Read(suffix[:])
	const room = validation.DNS1123LabelMaxLength - 1 - 2*len(suffix)
	base := strings.TrimSuffix(b.String(), "-")
	if len(base) > room {
		base = strings.TrimSuffix(base[:room], "-")
	}
	if base == "" {
		base = "x"
	}
	return fmt.Sprintf("%s-%s", base, hex.EncodeToString(suffix[:]))
}
