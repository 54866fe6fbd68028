package roles

import "path/filepath"

// SecretsFile is the name of a control-plane's secrets file in its data
// directory, and the key of the Kubernetes Secret that mounts it there.
const SecretsFile = "controlplane-secrets.json"

// ControlPlaneDir is a control-plane's data directory: its secrets file,
// its SQLite database (unless --database names another store) and its
// operator tokens. talkide dev's data directory holds the same files at
// its top, so that talkide admin works on either.
type ControlPlaneDir string

// Secrets is the secrets file's path.
func (d ControlPlaneDir) Secrets() string { return filepath.Join(string(d), SecretsFile) }

// Database is the SQLite database's path.
func (d ControlPlaneDir) Database() string { return filepath.Join(string(d), "controlplane.db") }

// OperatorTokens is the operator tokens file's path.
func (d ControlPlaneDir) OperatorTokens() string { return filepath.Join(string(d), "operator-tokens") }
