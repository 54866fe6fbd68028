package admincmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/trust"
)

func newAdminKeysCmd(std cli.Stdio) *cobra.Command {
	return cli.NewGroup("keys", "The control-plane's signing keys: the command secret and the WorkerToken keys, rotated by key id",
		newAdminKeysInitCmd(std), newAdminKeysRotateCmd(std), newAdminKeysListCmd(std))
}

// newAdminKeysInitCmd makes a control-plane's secrets file before any
// control-plane has run: what an operator puts into the Secret the
// control-plane's pods mount (docs/operations.md).
func newAdminKeysInitCmd(std cli.Stdio) *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the control-plane's secrets file (fresh signing keys) in --data-dir; refuses to replace one",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return cli.Usagef(cmd, "--data-dir is required")
			}
			path := roles.ControlPlaneDir(dataDir).Secrets()
			if _, err := os.Stat(path); err == nil {
				return fmt.Errorf("%s exists: its keys sign what workers and browsers hold; rotate them with talkide admin keys rotate", path)
			}
			if _, err := trust.LoadOrCreateSecrets(path); err != nil {
				return err
			}
			fmt.Fprintf(std.Err, "created %s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the directory to create controlplane-secrets.json in (created if missing)")
	cli.BindEnv(cmd.Flags(), "data-dir")
	return cmd
}

// Defaults of a key rotation. The publish delay covers the time for every
// replica and worker to read the new files: the kubelet's Secret update
// (about two minutes) twice over (the control-plane's file, then the
// worker's Secret the provisioner rewrites). The grace covers what was
// signed just before the switch: commands in flight and WorkerTokens
// (120 s).
const (
	defaultKeyPublish = 5 * time.Minute
	defaultKeyGrace   = 10 * time.Minute
)

func newAdminKeysRotateCmd(std cli.Stdio) *cobra.Command {
	var (
		loc            cpLocation
		only           string
		publish, grace time.Duration
		secretName     string
		cmd            *cobra.Command
	)
	cmd = adminLeaf(std, "rotate", "Add new signing keys that sign after --publish; the old ones verify for --grace more", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if publish < 0 {
			return cli.Usagef(cmd, "--publish must not be negative")
		}
		if grace <= 0 {
			return cli.Usagef(cmd, "--grace must be positive")
		}
		var rotateCommands, rotateTokens bool
		switch only {
		case "":
			rotateCommands, rotateTokens = true, true
		case "command":
			rotateCommands = true
		case "token":
			rotateTokens = true
		default:
			return cli.Usagef(cmd, "--only %q: want command or token", only)
		}
		var ns, name string
		if secretName != "" {
			var ok bool
			if ns, name, ok = strings.Cut(secretName, "/"); !ok || contract.ValidateID("namespace", ns) != nil || contract.ValidateID("name", name) != nil {
				return cli.Usagef(cmd, "--print-secret %q: want NAMESPACE/NAME", secretName)
			}
		}
		s, err := loc.secrets()
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Second)
		signFrom, retireAt := now.Add(publish), now.Add(publish+grace)
		var lines []string
		if rotateCommands {
			lines = append(lines, rotationLine("command key", s.RotateCommands(signFrom, retireAt, now)))
		}
		if rotateTokens {
			lines = append(lines, rotationLine("WorkerToken key", s.RotateTokens(signFrom, retireAt, now)))
		}
		// The OIDC login key is written down, so that it outlives the
		// command secret it may have been derived from.
		path := roles.ControlPlaneDir(loc.dataDir).Secrets()
		if secretName != "" {
			if err := writeSecretManifest(stdout, ns, name, s.JSON()); err != nil {
				return err
			}
		} else if err := s.Save(path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		for _, l := range lines {
			fmt.Fprintln(stderr, l)
		}
		if secretName != "" {
			fmt.Fprintf(stderr, "the Secret %s/%s holds the new file: apply it (kubectl apply -f -) before %s\n", ns, name, signFrom.Format(time.RFC3339))
		}
		return nil
	})
	fs := cmd.Flags()
	fs.StringVar(&only, "only", "", "rotate only the command key (command) or the WorkerToken key (token); default both")
	fs.DurationVar(&publish, "publish", defaultKeyPublish, "how long after now the new keys start signing: longer than it takes every replica and worker to read them")
	fs.DurationVar(&grace, "grace", defaultKeyGrace, "how long the old keys still verify after the new ones sign")
	fs.StringVar(&secretName, "print-secret", "", "print the new secrets file as the Kubernetes Secret NAMESPACE/NAME on stdout, instead of writing it (a mounted, read-only file)")
	return cmd
}

func rotationLine(what string, r trust.Rotation) string {
	next := r.Next
	var old []string
	for _, k := range r.Keys {
		if k.ID != next.ID {
			old = append(old, fmt.Sprintf("%s until %s", k.ID, k.RetireAt.Format(time.RFC3339)))
		}
	}
	l := fmt.Sprintf("new %s %s signs from %s", what, next.ID, next.SignFrom.Format(time.RFC3339))
	if len(old) > 0 {
		l += "; still verifying: " + strings.Join(old, ", ")
	}
	return l
}

// writeSecretManifest prints a Secret holding the secrets file, as JSON
// (which kubectl apply reads as well as YAML).
func writeSecretManifest(w io.Writer, ns, name string, file []byte) error {
	m := map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"data":     map[string][]byte{roles.SecretsFile: file},
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func newAdminKeysListCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	return adminLeaf(std, "list", "List the signing keys by id: when each signs and until when it verifies", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		s, err := loc.secrets()
		if err != nil {
			return err
		}
		now := time.Now()
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tID\tSTATE\tSIGNS FROM\tVERIFIES UNTIL")
		for _, ring := range []struct {
			kind string
			r    *trust.Keyring
		}{{"command", s.Commands()}, {"token", s.Tokens()}} {
			signing := ring.r.Signing(now).ID
			for _, k := range ring.r.Keys() {
				state := "verifies"
				switch {
				case k.ID == signing:
					state = "signs"
				case !k.RetireAt.IsZero() && !now.Before(k.RetireAt):
					state = "retired"
				case now.Before(k.SignFrom):
					state = "published"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ring.kind, k.ID, state, keyTime(k.SignFrom), keyTime(k.RetireAt))
			}
		}
		return tw.Flush()
	})
}

func keyTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
