package contract

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateModel(t *testing.T) {
	for _, s := range []string{"claude-sonnet-4-5", "claude-3-5-haiku@20241022", "anthropic.claude-v2:1", "a/b", strings.Repeat("m", MaxModelName)} {
		if err := ValidateModel("model", s); err != nil || !ValidModelName(s) {
			t.Errorf("ValidateModel(%q) = %v, ValidModelName = %v; want it accepted", s, err, ValidModelName(s))
		}
	}
	for _, s := range []string{"", "a\x00b", "a b", "tab\t", "é", "a\nb", "\x7f", strings.Repeat("m", MaxModelName+1)} {
		err := ValidateModel("--model", s)
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || fe.Field != "--model" || !errors.Is(err, ErrInvalidValue) || ValidModelName(s) {
			t.Errorf("ValidateModel(%q) = %v (ValidModelName %v); want a FieldError about --model", s, err, ValidModelName(s))
		}
	}
}

func TestSendMessageRequestValidate(t *testing.T) {
	tests := map[string]struct {
		req   SendMessageRequest
		field string
		code  string
	}{
		"ok":                {SendMessageRequest{ClientMessageID: "m_1", Text: "hi"}, "", ""},
		"no id":             {SendMessageRequest{Text: "hi"}, "client_message_id", CodeInvalidID},
		"traversal id":      {SendMessageRequest{ClientMessageID: "../x", Text: "hi"}, "client_message_id", CodeInvalidID},
		"empty text":        {SendMessageRequest{ClientMessageID: "m_1"}, "text", CodeBadRequest},
		"whitespace text":   {SendMessageRequest{ClientMessageID: "m_1", Text: " \n\t "}, "text", CodeBadRequest},
		"text at the limit": {SendMessageRequest{ClientMessageID: "m_1", Text: strings.Repeat("a", MaxMessageText)}, "", ""},
		"text too long":     {SendMessageRequest{ClientMessageID: "m_1", Text: strings.Repeat("a", MaxMessageText+1)}, "text", CodeTooLarge},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			fe, ok := errors.AsType[*FieldError](err)
			if !ok || fe.Field != tc.field || fe.Code != tc.code {
				t.Fatalf("Validate() = %#v, want a FieldError about %s with code %s", err, tc.field, tc.code)
			}
			if !strings.HasPrefix(err.Error(), tc.field+" ") {
				t.Errorf("message %q does not start with the field", err)
			}
		})
	}
}

func TestFieldErrorRename(t *testing.T) {
	err := ValidateID("user", "")
	fe, _ := errors.AsType[*FieldError](err)
	r := fe.Rename("--user")
	if r.Error() != "--user is empty" || fe.Field != "user" || !errors.Is(r, ErrInvalidID) {
		t.Errorf("Rename: %q (original %q)", r, fe)
	}
}

// FuzzValidateModel: the allocation-free check and the one that explains
// agree on every input.
func FuzzValidateModel(f *testing.F) {
	for _, s := range []string{"claude-sonnet-5-5", "", "a b", "x@y:z", "\x00", strings.Repeat("m", MaxModelName+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if (ValidateModel("model", s) == nil) != ValidModelName(s) {
			t.Fatalf("ValidateModel and ValidModelName disagree on %q", s)
		}
	})
}
