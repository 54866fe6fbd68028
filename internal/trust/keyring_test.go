package trust

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/fakeclock"
)

// A rotation of WorkerToken keys: the new key is published first and signs
// only from SignFrom; during the grace tokens of both verify; after it the
// old key's tokens are refused, by the id they name.
func TestKeyringRotationGrace(t *testing.T) {
	k := newKeyring(t, "k1", map[string][]byte{"k1": key1})
	signFrom, retireAt := t0.Add(5*time.Minute), t0.Add(15*time.Minute)
	next := Key{ID: "k2", Secret: key2, SignFrom: signFrom}
	if err := k.Set(Rotated(k.Keys(), next, retireAt, t0)); err != nil {
		t.Fatal(err)
	}

	// Published, not yet signing: every replica can verify k2 before any
	// replica signs with it.
	oldTok, _ := k.MintWorkerToken("acme", "prod", "c1", t0.Add(time.Minute))
	if id := WorkerTokenKeyID(oldTok); id != "k1" {
		t.Fatalf("before SignFrom the token is signed with %q, want k1", id)
	}
	newTok, _ := k.MintWorkerToken("acme", "prod", "c1", signFrom)
	if id := WorkerTokenKeyID(newTok); id != "k2" {
		t.Fatalf("from SignFrom the token is signed with %q, want k2", id)
	}
	if k.Newest().ID != "k2" || k.Signing(signFrom.Add(-time.Second)).ID != "k1" {
		t.Fatalf("Newest %q, Signing before SignFrom %q", k.Newest().ID, k.Signing(signFrom.Add(-time.Second)).ID)
	}

	// During the grace both verify.
	if _, err := k.VerifyWorkerToken(oldTok, t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("old key's token during the grace: %v", err)
	}
	if _, err := k.VerifyWorkerToken(newTok, signFrom.Add(time.Second)); err != nil {
		t.Fatalf("new key's token: %v", err)
	}
	if _, err := k.Verifying("k1", retireAt.Add(-time.Second)); err != nil {
		t.Fatalf("k1 a second before its retirement: %v", err)
	}

	// After the grace the old key is refused, even for a token whose own
	// lifetime would still allow it (minted with k1 at the last moment).
	lastOld, _ := k.MintWorkerToken("acme", "prod", "c1", signFrom.Add(-time.Second))
	if _, err := k.Verifying("k1", retireAt); !errors.Is(err, ErrRetiredKey) || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("k1 at its retirement: %v, want ErrRetiredKey (an ErrUnknownKey)", err)
	}
	// A token forged with k1 claiming a time after the retirement.
	forged := signToken(key1, "k1", b64(claimsJSON(t, WorkerClaims{Tenant: "acme", Env: "prod", ConversationID: "c1",
		IssuedAt: retireAt.Unix(), ExpiresAt: retireAt.Add(WorkerTokenTTL).Unix(), ID: "x"})))
	if _, err := k.VerifyWorkerToken(forged, retireAt.Add(time.Second)); !errors.Is(err, ErrRetiredKey) {
		t.Fatalf("a k1 token after the grace: %v, want ErrRetiredKey", err)
	}
	if _, err := k.VerifyWorkerToken(lastOld, signFrom.Add(time.Minute)); err != nil {
		t.Fatalf("the last k1 token within its lifetime and the grace: %v", err)
	}

	// The next rotation drops k1 (retired) and retires k2.
	later := retireAt.Add(time.Hour)
	if err := k.Set(Rotated(k.Keys(), Key{ID: "k3", Secret: testKey(0x33), SignFrom: later}, later.Add(time.Minute), later)); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, key := range k.Keys() {
		ids = append(ids, key.ID)
	}
	if strings.Join(ids, ",") != "k2,k3" {
		t.Fatalf("keys after the second rotation: %v, want k2,k3", ids)
	}
	if _, err := k.Verifying("k1", later); !errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrRetiredKey) {
		t.Fatalf("a dropped key: %v, want ErrUnknownKey", err)
	}
}

// A command signed with a master whose grace ended is refused by the
// verifier: the key id in the header selects the key, and a retired one is
// as unknown; the replacement verifies.
func TestSignatureWithRetiredKeyRefused(t *testing.T) {
	clk := fakeclock.New(t0)
	ring, err := NewRotatingKeyring([]Key{
		{ID: "c1", Secret: key1, RetireAt: t0.Add(10 * time.Minute)},
		{ID: "c2", Secret: key2},
	})
	if err != nil {
		t.Fatal(err)
	}
	var looked []string
	v := NewVerifier(ToWorker, func(tenant, env, kid string) ([]byte, bool) {
		looked = append(looked, kid)
		k, err := ring.Verifying(kid, clk.Now())
		return k, err == nil
	}, clk.Now)
	send := func(kid string, key []byte) error {
		r := httptest.NewRequest("POST", "/v1/sessions", nil)
		(&Signer{Direction: ToWorker, Tenant: "acme", Env: "prod", KeyID: kid, Key: key, Now: clk.Now}).Sign(r, nil)
		_, err := v.Verify(r, nil)
		return err
	}
	if err := send("c1", key1); err != nil {
		t.Fatalf("old key during the grace: %v", err)
	}
	if err := send("c2", key2); err != nil {
		t.Fatalf("new key: %v", err)
	}
	clk.Set(t0.Add(10 * time.Minute))
	if err := send("c1", key1); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old key after the grace: %v, want ErrUnknownKey", err)
	}
	if err := send("c2", key2); err != nil {
		t.Fatalf("new key after the grace: %v", err)
	}
	// One lookup per request, by the header's id: never a search.
	if strings.Join(looked, ",") != "c1,c2,c1,c2" {
		t.Fatalf("keys looked up: %v", looked)
	}

	// A Signer on the ring follows it: the signing key at the time.
	r := httptest.NewRequest("POST", "/x", nil)
	(&Signer{Direction: ToWorker, Tenant: "acme", Env: "prod", Ring: ring, Now: clk.Now}).Sign(r, nil)
	s, err := ParseSignature(r.Header.Get(SignatureHeader))
	if err != nil || s.KeyID != "c2" {
		t.Fatalf("a ring signer signed with %q (%v), want c2", s.KeyID, err)
	}
}

func TestValidateKeys(t *testing.T) {
	for name, keys := range map[string][]Key{
		"none":                  nil,
		"short secret":          {{ID: "a", Secret: []byte("short")}},
		"bad id":                {{ID: "a/b", Secret: key1}},
		"long id":               {{ID: strings.Repeat("a", 33), Secret: key1}},
		"repeated id":           {{ID: "a", Secret: key1}, {ID: "a", Secret: key2}},
		"newest retired":        {{ID: "a", Secret: key1, RetireAt: t0}},
		"retires before next":   {{ID: "a", Secret: key1, RetireAt: t0}, {ID: "b", Secret: key2, SignFrom: t0.Add(time.Second)}},
		"retires as next signs": {{ID: "a", Secret: key1, RetireAt: t0}, {ID: "b", Secret: key2, SignFrom: t0}},
	} {
		if err := ValidateKeys(keys); err == nil {
			t.Errorf("%s: ValidateKeys accepted %d keys", name, len(keys))
		} else if strings.Contains(err.Error(), string(key1)) {
			t.Errorf("%s: the error holds the key", name)
		}
	}
	k := newKeyring(t, "a", map[string][]byte{"a": key1})
	if err := k.Set([]Key{{ID: "a", Secret: []byte("short")}}); err == nil || k.Newest().ID != "a" || string(k.Newest().Secret) != string(key1) {
		t.Fatalf("a bad Set changed the keyring (%v)", err)
	}
}

func TestParseKey(t *testing.T) {
	text := FormatKey("c7", key1)
	k, err := ParseKey(" "+text+"\n", "c1")
	if err != nil || k.ID != "c7" || string(k.Secret) != string(key1) {
		t.Fatalf("ParseKey(FormatKey) = %q, %v", k.ID, err)
	}
	bare := strings.TrimPrefix(text, "c7:")
	if k, err = ParseKey(bare, "c1"); err != nil || k.ID != "c1" {
		t.Fatalf("a bare key: %q, %v, want id c1", k.ID, err)
	}
	for _, bad := range []string{"", "c1:", "c1:!!!", ":" + bare, "a/b:" + bare, "c1:" + FormatKey("x", []byte("short"))[2:]} {
		if _, err := ParseKey(bad, "c1"); err == nil {
			t.Errorf("ParseKey(%q) succeeded", bad)
		} else if strings.Contains(err.Error(), bare) {
			t.Errorf("ParseKey's error holds the key: %v", err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add(FormatKey("c1", key1))
	f.Add("c1:")
	f.Add(":::")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s, "d")
		if err != nil {
			return
		}
		if ValidateKeys([]Key{k}) != nil {
			t.Fatalf("ParseKey returned an invalid key for %q", s)
		}
		again, err := ParseKey(FormatKey(k.ID, k.Secret), "other")
		if err != nil || again.ID != k.ID || string(again.Secret) != string(k.Secret) {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}
