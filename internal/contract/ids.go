package contract

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"time"
)

// MaxIDLen bounds every id that crosses the seam: conversation ids become
// directory names and URL segments, client message ids become map keys.
const MaxIDLen = 128

// ErrInvalidID is wrapped by every id validation failure.
var ErrInvalidID = errors.New("invalid id")

// ValidateID checks that id is safe to use as a single path segment and a
// URL segment: 1..MaxIDLen characters from [A-Za-z0-9_-], not starting with
// '-' or '_'. Dots are excluded outright, so "." and ".." cannot occur.
func ValidateID(kind, id string) error {
	bad := func(reason string) error {
		return &FieldError{Field: kind, Reason: reason, Code: CodeInvalidID, Err: ErrInvalidID}
	}
	if id == "" {
		return bad("is empty")
	}
	if len(id) > MaxIDLen {
		return bad(fmt.Sprintf("is longer than %d characters", MaxIDLen))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return bad("may contain only letters, digits, '-' and '_' (and must start with a letter or digit)")
		}
	}
	return nil
}

// ValidateConversationID is ValidateID for conversation ids.
func ValidateConversationID(id string) error { return ValidateID("conversation id", id) }

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns prefix + 26 lowercase base32 characters carrying 128 random
// bits. The result passes ValidateID when prefix is a valid id of at most
// MaxIDLen-26 characters.
func NewID(prefix string) string {
	var b [16]byte
	return randomID(prefix, b, 0)
}

// randomID returns prefix + b encoded, b[from:] made random first.
func randomID(prefix string, b [16]byte, from int) string {
	if _, err := rand.Read(b[from:]); err != nil {
		panic("contract: crypto/rand failed: " + err.Error())
	}
	return prefix + idEncoding.EncodeToString(b[:])
}

// NewOrderedID is NewID whose first 48 bits are now in milliseconds since
// the Unix epoch (big-endian; times before it as zero) and the other 80
// random. The alphabet is in ASCII order, so ids made in a later
// millisecond sort after those made earlier, as strings and as bytes.
//
// It is for rows written at a high rate into a table keyed by the id, as
// the gateway's usage records and ledger entries are: a B-tree takes each
// new key at its end, so a batch of inserts dirties the index's last page
// or two, where random keys dirty a page per row and the database writes
// each of those pages again (bench/gateway, with one stream: 7-9 % less
// CPU per call in the control-plane, measured together with one other
// cut). It gives away when it was made, to the millisecond.
func NewOrderedID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(max(now.UnixMilli(), 0))
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	return randomID(prefix, b, 6)
}
