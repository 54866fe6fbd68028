package controlplane

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/tokenscheme"
)

// Operator tokens authenticate the operator API (/api/admin/). They look
// like "tko_<id>.<secret>", as identity tokens do: the id finds the stored
// hash, the secret is checked against it. Only the SHA-256 of the secret is
// kept, in a file of one token per line:
//
//	<id> <sha256 of the secret, hex> <created, RFC 3339> [name…]
//
// Blank lines and lines starting with '#' are ignored. `talkide admin
// operator-token issue|list|revoke` keeps the file; the control-plane reads
// it again whenever it changes, so tokens come and go without a restart.
var operatorTokens = tokenscheme.New("tko_", "operator token")

// MaxOperatorTokenLen bounds what ParseOperatorToken reads.
const MaxOperatorTokenLen = tokenscheme.MaxLen

// ErrNoOperatorToken is returned for an id that the file does not hold.
var ErrNoOperatorToken = errors.New("no such operator token")

// errOperatorToken is every failure to authenticate: one message for all,
// so that not even the token's id reaches the log.
var errOperatorToken = errors.New("not a valid operator token")

// OperatorToken is the stored half of an operator token: never the token.
type OperatorToken struct {
	ID        string
	Hash      [32]byte // SHA-256 of the secret
	CreatedAt time.Time
	Name      string // who or what it is for; free text without line breaks
}

// NewOperatorToken makes a random operator token. The token is shown once;
// only rec is stored.
func NewOperatorToken(name string, now time.Time) (token string, rec OperatorToken) {
	tok := operatorTokens.Issue()
	return tok.Token, OperatorToken{
		ID: tok.ID, Hash: tok.Hash, CreatedAt: now.UTC().Truncate(time.Second),
		Name: strings.Join(strings.Fields(name), " "),
	}
}

// ParseOperatorToken splits a token into its id and the hash of its secret.
func ParseOperatorToken(token string) (id string, hash [32]byte, err error) {
	p, err := operatorTokens.Parse(token)
	if err != nil {
		return "", hash, errOperatorToken
	}
	return p.ID, p.Hash, nil
}

func (t OperatorToken) line() string {
	l := t.ID + " " + hex.EncodeToString(t.Hash[:]) + " " + t.CreatedAt.UTC().Format(time.RFC3339)
	if t.Name != "" {
		l += " " + t.Name
	}
	return l + "\n"
}

// ParseOperatorTokens reads the content of an operator token file.
func ParseOperatorTokens(b []byte) ([]OperatorToken, error) {
	var out []OperatorToken
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want \"ID SHA256-HEX CREATED [NAME]\"", n)
		}
		var t OperatorToken
		t.ID = f[0]
		if !tokenscheme.ValidID(t.ID) {
			return nil, fmt.Errorf("line %d: bad token id", n)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("line %d: token id %s is given twice", n, t.ID)
		}
		seen[t.ID] = true
		h, err := hex.DecodeString(f[1])
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("line %d: the hash is not 64 hex digits", n)
		}
		copy(t.Hash[:], h)
		if t.CreatedAt, err = time.Parse(time.RFC3339, f[2]); err != nil {
			return nil, fmt.Errorf("line %d: the creation time is not RFC 3339", n)
		}
		t.Name = strings.Join(f[3:], " ")
		out = append(out, t)
	}
	return out, sc.Err()
}

// ReadOperatorTokens reads an operator token file; a missing file holds no
// tokens.
func ReadOperatorTokens(path string) ([]OperatorToken, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ts, err := ParseOperatorTokens(b)
	if err != nil {
		return nil, fmt.Errorf("operator tokens %s: %w", path, err)
	}
	return ts, nil
}

// AddOperatorToken appends t to the file at path, creating it (mode 0600)
// if needed.
func AddOperatorToken(path string, t OperatorToken) error {
	ts, err := ReadOperatorTokens(path)
	if err != nil {
		return err
	}
	for _, o := range ts {
		if o.ID == t.ID {
			return fmt.Errorf("operator token %s exists", t.ID)
		}
	}
	return writeOperatorTokens(path, append(ts, t))
}

// RemoveOperatorToken removes the token id from the file at path and
// returns it; ErrNoOperatorToken when the file does not hold it.
func RemoveOperatorToken(path, id string) (OperatorToken, error) {
	ts, err := ReadOperatorTokens(path)
	if err != nil {
		return OperatorToken{}, err
	}
	for i, t := range ts {
		if t.ID == id {
			return t, writeOperatorTokens(path, append(ts[:i:i], ts[i+1:]...))
		}
	}
	return OperatorToken{}, fmt.Errorf("%w: %s", ErrNoOperatorToken, id)
}

// writeOperatorTokens replaces the file at once, so a reader (the
// control-plane, which watches it) never sees half of it.
func writeOperatorTokens(path string, ts []OperatorToken) error {
	var b strings.Builder
	b.WriteString("# TalkIDE operator tokens: id, SHA-256 of the secret, created, name. Kept by talkide admin operator-token.\n")
	for _, t := range ts {
		b.WriteString(t.line())
	}
	return atomicfile.WriteFile(path, []byte(b.String()), 0o600)
}

// OperatorTokens checks operator tokens against a token file, which it
// reads again whenever it changes. A file that cannot be read or parsed
// admits nobody until it is fixed (the error is logged). It is safe for
// concurrent use.
type OperatorTokens struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	tokens map[string]OperatorToken // guarded by mu; by id
	stat   os.FileInfo              // guarded by mu; of the file read, nil: none
	bad    error                    // guarded by mu; why the current file admits nobody
}

// OperatorTokensOptions configure OperatorTokens.
type OperatorTokensOptions struct {
	Logger *slog.Logger // nil: don't log
}

// NewOperatorTokens checks tokens against the file at path. A missing file
// holds no tokens (every request is refused) until one is issued; a file
// that exists but is malformed is an error.
func NewOperatorTokens(path string, opts *OperatorTokensOptions) (*OperatorTokens, error) {
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	ot := &OperatorTokens{path: path, log: o.Logger}
	ot.mu.Lock()
	defer ot.mu.Unlock()
	ot.refresh()
	return ot, ot.bad
}

// Path returns the token file.
func (o *OperatorTokens) Path() string { return o.path }

// refresh reads the file again if it changed since it was read.
func (o *OperatorTokens) refresh() {
	fi, err := os.Stat(o.path)
	if errors.Is(err, os.ErrNotExist) {
		o.tokens, o.stat, o.bad = nil, nil, nil
		return
	}
	if err == nil && o.stat != nil && os.SameFile(fi, o.stat) && fi.ModTime().Equal(o.stat.ModTime()) && fi.Size() == o.stat.Size() {
		return
	}
	var ts []OperatorToken
	if err == nil {
		ts, err = ReadOperatorTokens(o.path)
	}
	if err != nil {
		if o.bad == nil || o.bad.Error() != err.Error() {
			o.log.Error("operator tokens unusable: the operator API admits nobody until the file is fixed", "path", o.path, "err", err.Error())
		}
		o.tokens, o.stat, o.bad = nil, nil, err
		return
	}
	o.tokens = make(map[string]OperatorToken, len(ts))
	for _, t := range ts {
		o.tokens[t.ID] = t
	}
	o.stat, o.bad = fi, nil
}

// Verify returns the stored token that token is, or an error that does not
// hold token.
func (o *OperatorTokens) Verify(token string) (OperatorToken, error) {
	t, err := tokenscheme.Verify(operatorTokens, token, time.Time{}, func(id string) (OperatorToken, tokenscheme.Stored, bool, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.refresh()
		t, ok := o.tokens[id]
		return t, tokenscheme.Stored{Hash: t.Hash}, ok, nil
	})
	if err != nil {
		return OperatorToken{}, errOperatorToken
	}
	return t, nil
}
