package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// Inner, Embedded and strictBody have the shapes the wire types have: a
// nested struct, a slice of them, a map, a pointer, a time, raw JSON, an
// embedded struct and an interface.
type Inner struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"`
}

type Embedded struct {
	Promoted string `json:"promoted,omitempty"`
}

type strictBody struct {
	Embedded
	ID     string            `json:"id"`
	Title  string            `json:"title,omitempty"`
	Inner  *Inner            `json:"inner,omitempty"`
	List   []Inner           `json:"list,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Time   time.Time         `json:"time,omitzero"`
	Raw    json.RawMessage   `json:"raw,omitempty"`
	Any    any               `json:"any,omitempty"`
	GoName string            // no tag: the key is "GoName"
	Hidden string            `json:"-"`
}

func TestDecodeJSONStrictKeys(t *testing.T) {
	tests := map[string]struct {
		body    string
		wantMsg string // "" means no error; else the 400's whole message
	}{
		"all exact": {body: `{"id":"a","promoted":"p","inner":{"name":"n"},"list":[{"name":"x","count":1}],` +
			`"labels":{"ID":"1","id":"2"},"time":"2026-01-02T03:04:05Z","raw":{"A":1,"a":2},"any":{"X":1,"x":2},"GoName":"g"}`},
		"duplicate":                 {body: `{"id":"a","id":"b"}`, wantMsg: `the request body has the key "id" twice`},
		"duplicate, escaped":        {body: `{"id":"a","\u0069d":"b"}`, wantMsg: `the request body has the key "id" twice`},
		"duplicate, same value":     {body: `{"id":"a","id":"a"}`, wantMsg: `the request body has the key "id" twice`},
		"duplicate in nested":       {body: `{"id":"a","inner":{"name":"x","name":"y"}}`, wantMsg: `the request body has the key "name" twice, in inner`},
		"duplicate in list":         {body: `{"list":[{"name":"x"},{"count":1,"count":2}]}`, wantMsg: `the request body has the key "count" twice, in list[1]`},
		"duplicate map key":         {body: `{"labels":{"k":"1","k":"2"}}`, wantMsg: `the request body has the key "k" twice, in labels`},
		"duplicate in raw":          {body: `{"raw":{"a":1,"a":2}}`, wantMsg: `the request body has the key "a" twice, in raw`},
		"duplicate in any":          {body: `{"any":[{"a":{"b":1,"b":2}}]}`, wantMsg: `the request body has the key "b" twice, in any[0].a`},
		"duplicate promoted":        {body: `{"promoted":"a","promoted":"b"}`, wantMsg: `the request body has the key "promoted" twice`},
		"upper case":                {body: `{"ID":"b"}`, wantMsg: `the request body has the key "ID" where "id" is meant: keys are case-sensitive`},
		"mixed case nested":         {body: `{"inner":{"Name":"x"}}`, wantMsg: `the request body has the key "Name" where "name" is meant: keys are case-sensitive, in inner`},
		"case of an untagged field": {body: `{"goname":"g"}`, wantMsg: `the request body has the key "goname" where "GoName" is meant: keys are case-sensitive`},
		"case of a promoted field":  {body: `{"Promoted":"p"}`, wantMsg: `the request body has the key "Promoted" where "promoted" is meant: keys are case-sensitive`},
		// encoding/json folds only ASCII letters: "ſ" is not "s" to it, nor
		// "K" (the Kelvin sign) "k", so these keys are unknown, refused all the same.
		"Kelvin sign is unknown":      {body: `{"list":[{"name":"x","\u212aount":1}]}`, wantMsg: "the request body is not valid JSON for this endpoint: json: unknown field \"\u212aount\""},
		"long s is unknown":           {body: "{\"title\":\"t\",\"\u017fitle\":\"u\"}", wantMsg: "the request body is not valid JSON for this endpoint: json: unknown field \"\u017fitle\""},
		"exact and case both":         {body: `{"id":"a","ID":"b"}`, wantMsg: `the request body has the key "ID" where "id" is meant: keys are case-sensitive`},
		"a hidden field is unknown":   {body: `{"Hidden":"h"}`, wantMsg: `the request body is not valid JSON for this endpoint: json: unknown field "Hidden"`},
		"unknown still encoding/json": {body: `{"idd":"a"}`, wantMsg: `the request body is not valid JSON for this endpoint: json: unknown field "idd"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got strictBody
			err := httpapi.DecodeJSON([]byte(tt.body), &got)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				var want strictBody
				if err := json.Unmarshal([]byte(tt.body), &want); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("decoded (-encoding/json +DecodeJSON):\n%s", diff)
				}
				return
			}
			he := asHTTPError(t, err, http.StatusBadRequest, contract.CodeBadRequest)
			if he.Msg != tt.wantMsg {
				t.Errorf("message\n %q, want\n %q", he.Msg, tt.wantMsg)
			}
		})
	}
}

// The wire types of the seam, decoded as the endpoints decode them: a
// duplicate or a case variant of a key is refused in each.
func TestDecodeJSONStrictWireTypes(t *testing.T) {
	tests := map[string]struct {
		v    any
		body string
	}{
		"send message, duplicate":   {&contract.SendMessageRequest{}, `{"client_message_id":"m1","text":"a","text":"b"}`},
		"send message, case":        {&contract.SendMessageRequest{}, `{"Client_Message_ID":"m1","text":"a"}`},
		"report batch, duplicate":   {&contract.ReportBatch{}, `{"reports":[{"idempotency_key":"k","kind":"usage","kind":"activity"}]}`},
		"report batch, nested case": {&contract.ReportBatch{}, `{"reports":[{"idempotency_key":"k","usage":{"Input_Tokens":1}}]}`},
		"issue, duplicate title":    {&contract.CreateIssueRequest{}, `{"title":"a","title":"b"}`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := httpapi.DecodeJSON([]byte(tt.body), tt.v)
			he := asHTTPError(t, err, http.StatusBadRequest, contract.CodeBadRequest)
			if !strings.Contains(he.Msg, "the request body has the key") {
				t.Errorf("message %q does not name the key", he.Msg)
			}
		})
	}
}

// FuzzDecodeJSONStrict holds DecodeJSON to encoding/json on what it accepts and
// to an independent reading of the keys on what it refuses: it accepts a
// body exactly when encoding/json (with unknown fields refused) decodes it
// as one value and no object in it has a key twice or a key that is a
// known field's name only in another case; what it accepts decodes to
// what encoding/json decodes.
func FuzzDecodeJSONStrict(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","promoted":"p","inner":{"name":"n"},"list":[{"name":"x","count":1}],"labels":{"k":"v"},"time":"2026-01-02T03:04:05Z","raw":[1,{"a":null}],"any":{"x":[true]},"GoName":"g"}`,
		`{"id":"a","id":"b"}`, `{"ID":"a"}`, `{"inner":{"NAME":"x"}}`, `{"\u0069d":"a"}`, `{"labels":{"a":"1","a":"2"}}`,
		`{"list":[{"\u212aount":1}]}`, `{"raw":{"a":1,"a":1}}`, `{}`, `[]`, `null`, `{"id":"a"} x`, `{"id":`,
	} {
		f.Add([]byte(s))
	}
	known := map[string]bool{}
	for _, k := range []string{"id", "promoted", "title", "inner", "list", "labels", "time", "raw", "any", "GoName", "name", "count"} {
		known[k] = true
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got strictBody
		err := httpapi.DecodeJSON(body, &got)
		if err != nil {
			var he *httpapi.Error
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest || he.Code != contract.CodeBadRequest {
				t.Fatalf("DecodeJSON error %v is not a 400 bad_request", err)
			}
		}

		var want strictBody
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		stdErr := dec.Decode(&want)
		if stdErr == nil {
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				stdErr = errors.New("trailing data")
			}
		}
		if stdErr != nil || len(bytes.TrimSpace(body)) == 0 {
			if err == nil {
				t.Fatalf("DecodeJSON accepted %q, which encoding/json refuses: %v", body, stdErr)
			}
			return
		}
		ambiguous := ambiguousKeys(t, body, known)
		switch {
		case ambiguous != "" && err == nil:
			t.Fatalf("DecodeJSON accepted %q, which has %s", body, ambiguous)
		case ambiguous == "" && err != nil:
			t.Fatalf("DecodeJSON refused %q: %v", body, err)
		case err == nil:
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("decoded (-encoding/json +DecodeJSON):\n%s", diff)
			}
		}
	})
}

// ambiguousKeys reads a valid JSON text's keys in the simplest way there is,
// and says what is wrong with them: a key twice in one object, or a key
// that equals a known name under case folding without being it. Case is
// looked at only where the decoder would match fields: the keys of
// objects that are not inside labels, raw or any.
func ambiguousKeys(t *testing.T, body []byte, known map[string]bool) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		obj   bool
		keys  map[string]bool
		free  bool // inside a map or raw JSON: keys are not fields
		key   bool // the next string token is a key
		field string
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return ""
		}
		if err != nil {
			t.Fatalf("reading valid JSON: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.obj && top.key {
			if top.keys[k] {
				return "the key " + k + " twice"
			}
			top.keys[k] = true
			top.key = false
			top.field = k
			if !top.free && !known[k] {
				for n := range known {
					if strings.EqualFold(n, k) {
						return "the key " + k + " for " + n
					}
				}
			}
			continue
		}
		free := top != nil && top.free
		if top != nil && top.obj && !top.free {
			switch top.field {
			case "labels", "raw", "any":
				free = true
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, free: free, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{free: free})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}
