package contract

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func TestValidateLine(t *testing.T) {
	tests := map[string]struct {
		in, want string // want "" with why: refused
		why      string // a substring of the error
	}{
		"plain":                       {in: "Flaky test", want: "Flaky test"},
		"trimmed":                     {in: "  Flaky test \t", want: "Flaky test"},
		"non-ASCII letters":           {in: "Überprüfung der Tests für café", want: "Überprüfung der Tests für café"},
		"CJK and ideographic space":   {in: "测试\u3000失败", want: "测试\u3000失败"},
		"no-break space":              {in: "a\u00a0b", want: "a\u00a0b"},
		"combining accent":            {in: "cafe\u0301", want: "cafe\u0301"},
		"emoji":                       {in: "ship it 🚀", want: "ship it 🚀"},
		"emoji ZWJ sequence":          {in: "👩\u200d💻 on call", want: "👩\u200d💻 on call"},
		"emoji ZWJ after selector":    {in: "❤\ufe0f\u200d🔥", want: "❤\ufe0f\u200d🔥"},
		"emoji ZWJ after skin tone":   {in: "👩🏽\u200d💻", want: "👩🏽\u200d💻"},
		"Persian ZWNJ":                {in: "می\u200cخواهم", want: "می\u200cخواهم"},
		"Devanagari ZWNJ":             {in: "क\u094d\u200cष", want: "क\u094d\u200cष"},
		"empty":                       {in: "", why: "is empty"},
		"blank":                       {in: " \t ", why: "is empty"},
		"NUL":                         {in: "a\x00b", why: "control character"},
		"ESC":                         {in: "a\x1b[31mred", why: "control character"},
		"CR LF":                       {in: "one\r\ntwo", why: "line break"},
		"LF":                          {in: "one\ntwo", why: "line break"},
		"CR":                          {in: "one\rtwo", why: "line break"},
		"tab inside":                  {in: "a\tb", why: "control character"},
		"DEL":                         {in: "a\x7fb", why: "control character"},
		"C1 CSI":                      {in: "a\u009b31mb", why: "control character"},
		"next line":                   {in: "a\u0085b", why: "line break"},
		"line separator":              {in: "one\u2028two", why: "line break"},
		"paragraph separator":         {in: "one\u2029two", why: "line break"},
		"right-to-left override":      {in: "invoice\u202etxt.exe", why: "bidirectional override"},
		"left-to-right embedding":     {in: "a\u202ab", why: "bidirectional override"},
		"right-to-left isolate":       {in: "a\u2067b\u2069", why: "bidirectional override"},
		"right-to-left mark":          {in: "a\u200fb", why: "invisible format character"},
		"Arabic letter mark":          {in: "a\u061cb", why: "invisible format character"},
		"zero-width space":            {in: "ad\u200bmin", why: "zero-width character"},
		"word joiner":                 {in: "ad\u2060min", why: "zero-width character"},
		"byte order mark":             {in: "\ufeffadmin", why: "zero-width character"},
		"ZWJ between Latin letters":   {in: "ad\u200dmin", why: "zero-width character"},
		"ZWJ at the end":              {in: "👩\u200d", why: "zero-width character"},
		"ZWJ after a space":           {in: "a \u200d💻", why: "zero-width character"},
		"ZWNJ between Latin letters":  {in: "ad\u200cmin", why: "zero-width character"},
		"ZWNJ at the start":           {in: "\u200cمی", why: "zero-width character"},
		"soft hyphen":                 {in: "ad\u00admin", why: "invisible format character"},
		"tag character":               {in: "a\U000e0041b", why: "invisible format character"},
		"invalid UTF-8":               {in: "a\xffb", why: "not valid UTF-8"},
		"200 characters of two bytes": {in: strings.Repeat("é", 200), want: strings.Repeat("é", 200)},
		"201 characters":              {in: strings.Repeat("é", 201), why: "201 characters, more than the 200 allowed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ValidateLine("title", tc.in, 200)
			if tc.why == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ValidateLine(%+q) = %+q, %v; want %+q", tc.in, got, err, tc.want)
				}
				return
			}
			fe, ok := errors.AsType[*FieldError](err)
			if !ok || fe.Field != "title" || fe.Code != CodeBadRequest || !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("ValidateLine(%+q) = %+q, %#v; want a FieldError about title", tc.in, got, err)
			}
			if !strings.Contains(err.Error(), tc.why) || !strings.HasPrefix(err.Error(), "title ") {
				t.Errorf("message %q does not start with the field or does not say %q", err, tc.why)
			}
			if got != "" {
				t.Errorf("a refused line returned %+q", got)
			}
		})
	}
}

// FuzzValidateLine: what ValidateLine accepts is trimmed, within its
// length, valid UTF-8, and holds no line break, control character or
// format character other than the two joiners; checking it again changes
// nothing.
func FuzzValidateLine(f *testing.F) {
	for _, s := range []string{"Flaky test", " a ", "a\x00", "\u202e", "👩\u200d💻", "می\u200cخواهم", "\xff", "a\u2028b", strings.Repeat("x", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ValidateLine("title", s, 50)
		if err != nil {
			if _, ok := errors.AsType[*FieldError](err); !ok {
				t.Fatalf("error %v is not a FieldError", err)
			}
			return
		}
		if got != strings.TrimSpace(s) || got == "" || !utf8.ValidString(got) || utf8.RuneCountInString(got) > 50 {
			t.Fatalf("ValidateLine(%+q) = %+q", s, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || (unicode.Is(unicode.Cf, r) && r != '\u200c' && r != '\u200d') {
				t.Fatalf("ValidateLine(%+q) accepted %U", s, r)
			}
		}
		if again, err := ValidateLine("title", got, 50); err != nil || again != got {
			t.Fatalf("ValidateLine of its own answer %+q = %+q, %v", got, again, err)
		}
	})
}

func TestValidateTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		t   time.Time
		why string // "" accepted
	}{
		"now":                {t: now},
		"a little ahead":     {t: now.Add(MaxFutureSkew)},
		"an hour ago":        {t: now.Add(-time.Hour)},
		"at the oldest":      {t: now.Add(-MaxReportAge)},
		"another zone":       {t: now.In(time.FixedZone("x", 3600))},
		"zero":               {why: "is missing"},
		"9999-12-31":         {t: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), why: "in the future"},
		"beyond the skew":    {t: now.Add(MaxFutureSkew + time.Second), why: "in the future"},
		"older than allowed": {t: now.Add(-MaxReportAge - time.Second), why: "more than 90 days ago"},
		"year 1":             {t: time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC), why: "more than 90 days ago"},
		"before the epoch":   {t: time.Unix(-1, 0), why: "more than 90 days ago"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := ValidateTime("time", tc.t, now, MaxReportAge)
			if tc.why == "" {
				if err != nil {
					t.Fatalf("ValidateTime(%v) = %v", tc.t, err)
				}
				return
			}
			if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "time" || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("ValidateTime(%v) = %v; want a FieldError about time saying %q", tc.t, err, tc.why)
			}
		})
	}
}

func TestValidateCount(t *testing.T) {
	for n, ok := range map[int64]bool{0: true, 1: true, MaxReportTokens: true, -1: false, MaxReportTokens + 1: false, -1 << 63: false, 1<<63 - 1: false} {
		err := ValidateCount("input_tokens", n, MaxReportTokens)
		if (err == nil) != ok {
			t.Errorf("ValidateCount(%d) = %v, want accepted %v", n, err, ok)
		}
		if fe, isFE := errors.AsType[*FieldError](err); err != nil && (!isFE || fe.Field != "input_tokens") {
			t.Errorf("ValidateCount(%d) = %#v, not a FieldError about input_tokens", n, err)
		}
	}
}

func TestReportValidate(t *testing.T) {
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
	usage := func(mut func(*Report)) Report {
		r := Report{IdempotencyKey: "demo/usage-1", Kind: ReportUsage, ConversationID: "demo", TurnID: "t_1", Time: now,
			Usage: &Usage{Model: "claude-sonnet-5-5", InputTokens: 50, OutputTokens: 12}}
		if mut != nil {
			mut(&r)
		}
		return r
	}
	tool := Report{IdempotencyKey: "demo/tool-1", Kind: ReportToolUse, ConversationID: "demo", Time: now,
		Tool: &ToolReport{ID: "toolu_1", Name: "Bash", DurationMS: 4}}
	activity := Report{IdempotencyKey: "demo/r-1", Kind: ReportActivity, ConversationID: "demo", Time: now, Activity: "ran the tests"}
	ended := func(mut func(*Report)) Report {
		r := Report{IdempotencyKey: "demo/t_1/turn-ended", Kind: ReportTurnEnded, ConversationID: "demo", TurnID: "t_1", Time: now,
			Reply: &TurnReply{Text: "Done: the tests pass.\n\n```go\nx := 1\n```"}}
		mut(&r)
		return r
	}
	tests := map[string]struct {
		r     Report
		field string // "" accepted
	}{
		"usage":                      {r: usage(nil)},
		"usage without a model":      {r: usage(func(r *Report) { r.Usage.Model = "" })},
		"any traceparent":            {r: usage(func(r *Report) { r.Traceparent = "\x00not one" + strings.Repeat("-", MaxTraceparent) })},
		"tool":                       {r: tool},
		"activity":                   {r: activity},
		"no key":                     {r: usage(func(r *Report) { r.IdempotencyKey = "" }), field: "idempotency_key"},
		"key with NUL":               {r: usage(func(r *Report) { r.IdempotencyKey = "a\x00b" }), field: "idempotency_key"},
		"key too long":               {r: usage(func(r *Report) { r.IdempotencyKey = strings.Repeat("k", MaxIdempotencyKey+1) }), field: "idempotency_key"},
		"traversal conversation":     {r: usage(func(r *Report) { r.ConversationID = "../x" }), field: "conversation_id"},
		"bad turn":                   {r: usage(func(r *Report) { r.TurnID = "t 1" }), field: "turn_id"},
		"unknown kind":               {r: usage(func(r *Report) { r.Kind = "spend" }), field: "kind"},
		"9999-12-31":                 {r: usage(func(r *Report) { r.Time = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) }), field: "time"},
		"no time":                    {r: usage(func(r *Report) { r.Time = time.Time{} }), field: "time"},
		"negative input tokens":      {r: usage(func(r *Report) { r.Usage.InputTokens = -1000 }), field: "usage.input_tokens"},
		"negative output tokens":     {r: usage(func(r *Report) { r.Usage.OutputTokens = -1 }), field: "usage.output_tokens"},
		"negative cache writes":      {r: usage(func(r *Report) { r.Usage.CacheCreationInputTokens = -1 }), field: "usage.cache_creation_input_tokens"},
		"huge cache reads":           {r: usage(func(r *Report) { r.Usage.CacheReadInputTokens = 1<<63 - 1 }), field: "usage.cache_read_input_tokens"},
		"model with NUL":             {r: usage(func(r *Report) { r.Usage.Model = "a\x00b" }), field: "usage.model"},
		"usage missing":              {r: usage(func(r *Report) { r.Usage = nil }), field: "usage"},
		"tool missing":               {r: Report{IdempotencyKey: "k", Kind: ReportToolUse, ConversationID: "demo", Time: now}, field: "tool"},
		"negative tool duration":     {r: Report{IdempotencyKey: "k", Kind: ReportToolUse, ConversationID: "demo", Time: now, Tool: &ToolReport{ID: "t", Name: "Bash", DurationMS: -5}}, field: "tool.duration_ms"},
		"tool name with ESC":         {r: Report{IdempotencyKey: "k", Kind: ReportToolUse, ConversationID: "demo", Time: now, Tool: &ToolReport{ID: "t", Name: "Ba\x1bsh"}}, field: "tool.name"},
		"activity of two lines":      {r: Report{IdempotencyKey: "k", Kind: ReportActivity, ConversationID: "demo", Time: now, Activity: "a\nb"}, field: "activity"},
		"activity with an override":  {r: Report{IdempotencyKey: "k", Kind: ReportActivity, ConversationID: "demo", Time: now, Activity: "a\u202eb"}, field: "activity"},
		"activity empty":             {r: Report{IdempotencyKey: "k", Kind: ReportActivity, ConversationID: "demo", Time: now}, field: "activity"},
		"turn ended":                 {r: ended(func(*Report) {})},
		"turn ended without text":    {r: ended(func(r *Report) { r.Reply.Text = "" })},
		"turn ended at the limit":    {r: ended(func(r *Report) { r.Reply.Text = strings.Repeat("é", MaxReplyText/2) })},
		"turn ended, reply too long": {r: ended(func(r *Report) { r.Reply.Text = strings.Repeat("x", MaxReplyText+1) }), field: "reply.text"},
		"turn ended, invalid utf-8":  {r: ended(func(r *Report) { r.Reply.Text = "a\xffb" }), field: "reply.text"},
		"turn ended without reply":   {r: ended(func(r *Report) { r.Reply = nil }), field: "reply"},
		"turn ended without turn":    {r: ended(func(r *Report) { r.TurnID = "" }), field: "turn_id"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.r.Validate(now)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			fe, ok := errors.AsType[*FieldError](err)
			if !ok || fe.Field != tc.field {
				t.Fatalf("Validate() = %#v, want a FieldError about %s", err, tc.field)
			}
		})
	}
}
