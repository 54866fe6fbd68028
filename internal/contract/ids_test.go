package contract

import (
	"errors"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateID(t *testing.T) {
	valid := map[string]string{
		"one letter":          "a",
		"one upper-case":      "A",
		"one digit":           "7",
		"NewID shape":         "c_0123456789abcdefghjkmnpqrs",
		"dash inside":         "abc-def",
		"underscore inside":   "abc_def",
		"trailing dash":       "a-",
		"trailing underscore": "a_",
		"all separators":      "a-_-_",
		"MaxIDLen":            strings.Repeat("a", MaxIDLen),
	}
	for name, id := range valid {
		t.Run("valid/"+name, func(t *testing.T) {
			if err := ValidateID("test id", id); err != nil {
				t.Errorf("ValidateID(%q): %v", id, err)
			}
		})
	}

	invalid := map[string]string{
		"empty":               "",
		"too long":            strings.Repeat("a", MaxIDLen+1),
		"far too long":        strings.Repeat("a", 10000),
		"leading dash":        "-a",
		"leading underscore":  "_a",
		"dash only":           "-",
		"dot":                 ".",
		"dot dot":             "..",
		"inner dot":           "a.b",
		"trailing dot":        "a.",
		"slash":               "a/b",
		"leading slash":       "/a",
		"traversal":           "../etc",
		"backslash":           `a\b`,
		"backslash traversal": `..\a`,
		"NUL":                 "a\x00",
		"space":               "a b",
		"tab":                 "a\tb",
		"newline":             "a\n",
		"colon":               "c:",
		"percent":             "a%2Fb",
		"query":               "a?b",
		"fragment":            "a#b",
		"plus":                "a+b",
		"tilde":               "~a",
		"non-ASCII":           "é",
		"non-ASCII digit":     "a٣",
		"full-width slash":    "a／b",
		"invalid UTF-8":       "a\xff",
	}
	for name, id := range invalid {
		t.Run("invalid/"+name, func(t *testing.T) {
			err := ValidateID("test id", id)
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ValidateID(%q) = %v, want ErrInvalidID", id, err)
			}
			if !strings.Contains(err.Error(), "test id") {
				t.Errorf("error %q does not name the kind of id", err)
			}
		})
	}
}

func TestValidateConversationID(t *testing.T) {
	if err := ValidateConversationID("c_1"); err != nil {
		t.Errorf("ValidateConversationID(c_1): %v", err)
	}
	err := ValidateConversationID("../x")
	if !errors.Is(err, ErrInvalidID) {
		t.Fatalf("ValidateConversationID(../x) = %v, want ErrInvalidID", err)
	}
	if !strings.Contains(err.Error(), "conversation id") {
		t.Errorf("error %q does not say it is a conversation id", err)
	}
}

func TestNewID(t *testing.T) {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	for _, prefix := range []string{"c_", "m_", "t_", "r_", "gw_", "x", ""} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			const n = 2000
			seen := make(map[string]bool, n)
			for range n {
				id := NewID(prefix)
				suffix, ok := strings.CutPrefix(id, prefix)
				if !ok {
					t.Fatalf("NewID(%q) = %q lacks the prefix", prefix, id)
				}
				if len(suffix) != 26 {
					t.Fatalf("NewID(%q) = %q: %d random characters, want 26", prefix, id, len(suffix))
				}
				if i := strings.IndexFunc(suffix, func(r rune) bool { return !strings.ContainsRune(alphabet, r) }); i >= 0 {
					t.Fatalf("NewID(%q) = %q: %q is not in the alphabet", prefix, id, suffix[i])
				}
				if err := ValidateID("new id", id); err != nil {
					t.Fatalf("NewID(%q) = %q fails validation: %v", prefix, id, err)
				}
				if seen[id] {
					t.Fatalf("NewID(%q) repeated %q", prefix, id)
				}
				seen[id] = true
			}
		})
	}
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{
		"c_1", NewID("c_"), "", ".", "..", "a/b", `a\b`, "a\x00", "-a", "_a", "a-",
		strings.Repeat("a", MaxIDLen), strings.Repeat("a", MaxIDLen+1), "é", "a\xff", "%2e%2e",
	} {
		f.Add(s)
	}
	root := filepath.Join(f.TempDir(), "sessions")
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateID("id", id)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("err = %v, want ErrInvalidID", err)
			}
			return
		}
		if id == "" || len(id) > MaxIDLen {
			t.Fatalf("accepted an id of %d bytes", len(id))
		}
		if strings.ContainsAny(id, "/\\.\x00") {
			t.Fatalf("accepted %q", id)
		}
		p := filepath.Join(root, id)
		if filepath.Dir(p) != root || filepath.Base(p) != id {
			t.Fatalf("filepath.Join(root, %q) = %q is not a direct child of root", id, p)
		}
		if rel, err := filepath.Rel(root, p); err != nil || rel != id {
			t.Fatalf("filepath.Rel(root, %q) = %q, %v", p, rel, err)
		}
		if !filepath.IsLocal(id) {
			t.Fatalf("accepted non-local path %q", id)
		}
		// A URL segment that needs no escaping.
		if url.PathEscape(id) != id {
			t.Fatalf("accepted %q, which needs escaping in a URL path", id)
		}
	})
}

func TestNewOrderedID(t *testing.T) {
	epochMs := func(id string) int64 {
		t.Helper()
		suffix, ok := strings.CutPrefix(id, "gw_")
		if !ok || len(suffix) != 26 {
			t.Fatalf("NewOrderedID = %q: want gw_ and 26 characters", id)
		}
		if err := ValidateID("ordered id", id); err != nil {
			t.Fatalf("NewOrderedID = %q fails validation: %v", id, err)
		}
		b, err := idEncoding.DecodeString(suffix)
		if err != nil || len(b) != 16 {
			t.Fatalf("NewOrderedID = %q does not decode to 16 bytes: %v", id, err)
		}
		var ms int64
		for _, c := range b[:6] {
			ms = ms<<8 | int64(c)
		}
		return ms
	}

	t.Run("carries the time", func(t *testing.T) {
		for _, now := range []time.Time{
			time.UnixMilli(0), time.UnixMilli(1), time.Date(2026, 12, 3, 14, 0, 0, 999_999_999, time.UTC),
			time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		} {
			if got := epochMs(NewOrderedID("gw_", now)); got != now.UnixMilli() {
				t.Errorf("NewOrderedID(%v) carries %d ms, want %d", now, got, now.UnixMilli())
			}
		}
		if got := epochMs(NewOrderedID("gw_", time.UnixMilli(-5))); got != 0 {
			t.Errorf("a time before the epoch carries %d ms, want 0", got)
		}
	})

	t.Run("sorts by time", func(t *testing.T) {
		// Random times, each a millisecond or more after the last: the ids
		// must come out in the same order, as strings.
		rng := rand.New(rand.NewPCG(1, 2))
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		prev := ""
		for i := range 5000 {
			now = now.Add(time.Millisecond + time.Duration(rng.Int64N(int64(1000*time.Hour))))
			id := NewOrderedID("gw_", now)
			if id <= prev {
				t.Fatalf("id %d made at %v = %q sorts before or with the one made earlier, %q", i, now, id, prev)
			}
			prev = id
		}
	})

	t.Run("unique within a millisecond", func(t *testing.T) {
		now := time.Now()
		seen := map[string]bool{}
		for range 5000 {
			id := NewOrderedID("gw_", now)
			if seen[id] {
				t.Fatalf("repeated %q", id)
			}
			seen[id] = true
		}
	})
}
