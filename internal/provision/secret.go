package provision

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/talkide/platform/internal/trust"
)

// The Kubernetes Secret a worker reads its credentials from, and its keys.
// Mounted as files, each key is one file: identity-token holds the token
// (for --identity-token-file), command-key the derived command key as
// "ID:BASE64" (trust.FormatKey, for --command-key-file or
// TALKIDE_WORKER_COMMAND_KEY: the id travels in the same file, so a rotated
// Secret changes both in one swap), command-key-id its id again, for people.
const (
	SecretName       = "talkide-worker-token"
	KeyIdentityToken = "identity-token"
	KeyCommandKey    = "command-key"
	KeyCommandKeyID  = "command-key-id"
)

// Labels and annotations on the Secret (and, for the labels, on every
// object of a tenant-env); none carries a secret. The token id annotation
// tells an operator, and the Kubernetes provisioner, which token the
// Secret holds.
const (
	LabelTenant           = "talkide/tenant"
	LabelEnv              = "talkide/env"
	AnnotationTokenID     = "talkide/identity-token-id"
	AnnotationTokenExpiry = "talkide/identity-token-expires-at"
)

// WorkerSecret is what the worker of one tenant-env needs: its identity
// token and its command signing key. It holds secrets: String, GoString and
// LogValue redact them, so only YAML, JSON and Data ever show them.
type WorkerSecret struct {
	Tenant    string
	Env       string
	Namespace string
	// IdentityToken is the token itself; IdentityTokenID its public id.
	IdentityToken   string
	IdentityTokenID string
	// ExpiresAt is the token's expiry, shown as an annotation; zero leaves
	// it out.
	ExpiresAt time.Time
	// CommandKey is trust.DeriveEnvKey(master, Tenant, Env), CommandKeyID
	// the id of the master secret it was derived from.
	CommandKeyID string
	CommandKey   []byte
}

// NewWorkerSecret builds the worker Secret of tenant/env from the
// control-plane's master command secret (and its key id) and an identity
// token just issued for that tenant-env.
func NewWorkerSecret(master []byte, keyID, tenant, env, identityToken string) WorkerSecret {
	id, _, _ := trust.ParseIdentityToken(identityToken)
	return WorkerSecret{
		Tenant: tenant, Env: env, Namespace: Namespace(tenant, env),
		IdentityToken: identityToken, IdentityTokenID: id,
		CommandKeyID: keyID, CommandKey: trust.DeriveEnvKey(master, tenant, env),
	}
}

// Data returns the Secret's keys and the contents of their files.
func (w WorkerSecret) Data() map[string]string {
	return map[string]string{
		KeyIdentityToken: w.IdentityToken,
		KeyCommandKey:    trust.FormatKey(w.CommandKeyID, w.CommandKey),
		KeyCommandKeyID:  w.CommandKeyID,
	}
}

// k8sSecret is a core/v1 Secret, as much of it as we write.
type k8sSecret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   k8sMeta           `json:"metadata"`
	Type       string            `json:"type"`
	Data       map[string]string `json:"data"`
}

type k8sMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func (w WorkerSecret) manifest() k8sSecret {
	s := k8sSecret{
		APIVersion: "v1", Kind: "Secret", Type: "Opaque",
		Metadata: k8sMeta{
			Name: SecretName, Namespace: w.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":    "talkide-worker",
				"app.kubernetes.io/part-of": "talkide",
				LabelTenant:                 w.Tenant,
				LabelEnv:                    w.Env,
			},
			Annotations: map[string]string{},
		},
		Data: map[string]string{},
	}
	if w.IdentityTokenID != "" {
		s.Metadata.Annotations[AnnotationTokenID] = w.IdentityTokenID
	}
	if !w.ExpiresAt.IsZero() {
		s.Metadata.Annotations[AnnotationTokenExpiry] = w.ExpiresAt.UTC().Format(time.RFC3339)
	}
	for k, v := range w.Data() {
		s.Data[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return s
}

// JSON renders the Secret as a Kubernetes manifest in JSON (kubectl apply
// -f takes it as it takes YAML).
func (w WorkerSecret) JSON() []byte {
	b, err := json.MarshalIndent(w.manifest(), "", "  ")
	if err != nil {
		panic("provision: marshal secret: " + err.Error()) // maps of strings always marshal
	}
	return append(b, '\n')
}

// YAML renders the Secret as a Kubernetes manifest in YAML. Every scalar is
// double-quoted (a JSON string is a valid YAML double-quoted scalar), so no
// value can be misread as another type.
func (w WorkerSecret) YAML() []byte {
	m := w.manifest()
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmetadata:\n", m.APIVersion, m.Kind)
	fmt.Fprintf(&b, "  name: %s\n  namespace: %s\n", quote(m.Metadata.Name), quote(m.Metadata.Namespace))
	writeMap(&b, "  ", "labels", m.Metadata.Labels)
	writeMap(&b, "  ", "annotations", m.Metadata.Annotations)
	fmt.Fprintf(&b, "type: %s\n", m.Type)
	writeMap(&b, "", "data", m.Data)
	return b.Bytes()
}

func writeMap(b *bytes.Buffer, indent, name string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(b, "%s%s:\n", indent, name)
	for _, k := range keys {
		fmt.Fprintf(b, "%s  %s: %s\n", indent, quote(k), quote(m[k]))
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// String describes the Secret without its secrets.
func (w WorkerSecret) String() string {
	return fmt.Sprintf("Secret %s/%s (tenant %s, env %s, identity token %s, command key %s: [redacted])",
		w.Namespace, SecretName, w.Tenant, w.Env, w.IdentityTokenID, w.CommandKeyID)
}

// GoString is String, so %#v redacts too.
func (w WorkerSecret) GoString() string { return w.String() }

// LogValue keeps the secrets out of slog output.
func (w WorkerSecret) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("tenant", w.Tenant), slog.String("env", w.Env),
		slog.String("namespace", w.Namespace), slog.String("identity_token_id", w.IdentityTokenID),
		slog.String("command_key_id", w.CommandKeyID),
	)
}
