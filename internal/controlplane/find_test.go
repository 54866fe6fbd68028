package controlplane_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/store"
)

// sendText sends text in conversation id as the local user.
func (h *harness) sendText(id, cmid, text string) {
	h.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text, "client_message_id": cmid})
	resp, body := h.do(http.MethodPost, "/api/conversations/"+id+"/messages", string(b), nil)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		h.t.Fatalf("send in %s: %d %s", id, resp.StatusCode, body)
	}
}

func (h *harness) createUntitled(id string) {
	h.t.Helper()
	resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"`+id+`"}`, nil)
	if resp.StatusCode != http.StatusCreated {
		h.t.Fatalf("create %s: %d %s", id, resp.StatusCode, body)
	}
}

func (h *harness) title(id string) string {
	h.t.Helper()
	c, err := h.store.GetConversation(h.t.Context(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return c.Title
}

const firstMessage = "Fix the flaky scheduler test in CI please, it fails every other run"

// A new conversation is named after its first message by a call through
// the gateway, recorded as a title call; when the call cannot be made or
// fails, by the message's first words; never over a name the user gave.
func TestTitles(t *testing.T) {
	sim := func() http.Handler { return anthropicsim.New(simKey, nil) }
	failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"type":"error","error":{"type":"api_error","message":"down"}}`, http.StatusInternalServerError)
	})
	plain := "Fix the flaky scheduler test in CI please,"
	tests := map[string]struct {
		opts      harnessOptions
		limit     bool // a daily limit of 0 for the user
		want      string
		wantCalls int // title calls recorded in usage
	}{
		"by the model":          {opts: harnessOptions{titles: sim(), titleModel: "claude-sim", budget: true}, want: "[simulator] Fix the flaky scheduler test in", wantCalls: 1},
		"refused by the budget": {opts: harnessOptions{titles: sim(), titleModel: "claude-sim", budget: true}, limit: true, want: plain},
		"the model failing":     {opts: harnessOptions{titles: failing, titleModel: "claude-sim"}, want: plain, wantCalls: 1},
		"no model configured":   {opts: harnessOptions{titles: sim()}, want: plain},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, tt.opts)
			if tt.limit {
				if err := h.budget.SetLimit(t.Context(), budget.Limit{Subject: budget.User(user), Kind: budget.SpendPerDay, Max: 0, Hard: true}); err != nil {
					t.Fatal(err)
				}
			}
			h.createUntitled("c1")
			h.sendText("c1", "m_1", firstMessage)
			poll.Until(t, "a title", func() bool { return h.title("c1") != "" })
			if got := h.title("c1"); got != tt.want {
				t.Errorf("title %q, want %q", got, tt.want)
			}
			h.sendText("c1", "m_2", "a second message names nothing")
			if err := h.gw.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			us, err := h.store.ListUsage(t.Context(), "c1")
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			for _, u := range us {
				if u.Purpose == store.PurposeTitle {
					calls++
				}
			}
			if calls != tt.wantCalls || len(us) != tt.wantCalls {
				t.Errorf("%d usage records, %d of them title calls; want %d title calls and nothing else", len(us), calls, tt.wantCalls)
			}
			// The user's own name stays; a later rename is theirs too.
			resp, body := h.do(http.MethodPatch, "/api/conversations/c1", `{"title":"Mine"}`, nil)
			if resp.StatusCode != http.StatusOK || h.title("c1") != "Mine" {
				t.Errorf("rename after the title: %d %s, title %q", resp.StatusCode, body, h.title("c1"))
			}
		})
	}

	t.Run("named by the user", func(t *testing.T) {
		h := newHarness(t, harnessOptions{titles: sim(), titleModel: "claude-sim"})
		resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"c2","title":"My own"}`, nil)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		h.sendText("c2", "m_1", firstMessage)
		if err := h.gw.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if us, _ := h.store.ListUsage(t.Context(), "c2"); len(us) != 0 || h.title("c2") != "My own" {
			t.Errorf("a named conversation: %d calls, title %q", len(us), h.title("c2"))
		}
	})
}

func TestFallbackTitle(t *testing.T) {
	h := newHarness(t, harnessOptions{}) // no RunTitles: every send queues
	tests := map[string]string{
		"one\nline\tplease":                                "one line please",
		"\u202eevil\u202c override  ":                      "evil override",
		strings.Repeat("x", 300):                           strings.Repeat("x", 80),
		"```go\nfunc main() {}\n```":                       "```go func main() {} ```",
		"one two three four five six seven eight nine ten": "one two three four five six seven eight",
	}
	// The queue holds 64; the ones after it are named plainly at once.
	for i := range 64 {
		id := "q" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		h.createUntitled(id)
		h.sendText(id, "m_"+id, "queued")
	}
	i := 0
	for text, want := range tests {
		id := "f" + string(rune('a'+i))
		i++
		h.createUntitled(id)
		h.sendText(id, "m_"+id, text)
		if got := h.title(id); got != want {
			t.Errorf("plain title of %q = %q, want %q", text, got, want)
		}
		if err := contractLine(h.title(id)); err != nil {
			t.Errorf("title %q: %v", h.title(id), err)
		}
	}
}

func contractLine(s string) error {
	_, err := contract.ValidateLine("title", s, contract.MaxConversationTitle)
	return err
}

// The search finds the caller's conversations by their messages, replies
// and titles, with a snippet; a reply is indexed once however often its
// report comes, and its turn's end moves the conversation to the top.
func TestSearch(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createUntitled("c1")
	h.createUntitled("c2")
	h.insertConversation("bobs", otherUser, env)
	if _, err := h.store.AddConversationText(t.Context(), store.ConversationText{ConversationID: "bobs", Key: "m/x", Kind: store.TextUser, Body: "kubernetes of bob", At: start}); err != nil {
		t.Fatal(err)
	}
	h.sendText("c1", "m_1", "How do I deploy to kubernetes?")
	h.clock.Advance(time.Minute)
	reply := strings.Repeat("Some preamble words. ", 20) + "The flaky test was a race in the scheduler.\n\nDone."
	ended := contract.Report{IdempotencyKey: "c2/t_1/turn-ended", Kind: contract.ReportTurnEnded, ConversationID: "c2", TurnID: "t_1",
		Time: h.clock.Now(), Reply: &contract.TurnReply{Text: reply}}
	for range 2 { // a batch sent again
		body := batch(t, ended)
		resp, b := h.send(h.reportRequest(h.reportSigner(env), body), body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("report: %d %s", resp.StatusCode, b)
		}
	}
	if rs := h.storedReports("c2"); len(rs) != 1 || rs[0].Reply != nil {
		t.Errorf("stored reports %+v: want the one turn_ended, without its reply", rs)
	}
	c2, err := h.store.GetConversation(t.Context(), "c2")
	if err != nil || !c2.LastActivityAt.Equal(h.clock.Now()) {
		t.Errorf("c2's activity %v, %v; want the turn's end %v", c2.LastActivityAt, err, h.clock.Now())
	}

	search := func(q string) []controlplane.SearchResult {
		t.Helper()
		resp, body := h.do(http.MethodGet, "/api/search?q="+url.QueryEscape(q), "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("search %q: %d %s", q, resp.StatusCode, body)
		}
		var out struct {
			Results []controlplane.SearchResult `json:"results"`
		}
		decodeJSON(t, body, &out)
		if out.Results == nil {
			t.Errorf("results is null: %s", body)
		}
		return out.Results
	}
	got := search("scheduler race")
	if len(got) != 1 || got[0].Conversation.ID != "c2" || got[0].Kind != store.TextAssistant {
		t.Fatalf("search for a reply's words: %+v", got)
	}
	if want := "…preamble words. The flaky test was a race in the scheduler. Done."; !strings.HasSuffix(got[0].Snippet, "race in the scheduler. Done.") || !strings.HasPrefix(got[0].Snippet, "…") || len(got[0].Snippet) > 260 {
		t.Errorf("snippet %q, want one line like %q", got[0].Snippet, want)
	}
	if got := search("kubern"); len(got) != 1 || got[0].Conversation.ID != "c1" || got[0].Snippet != "How do I deploy to kubernetes?" {
		t.Errorf("search for a message's word: %+v (bob's conversation must not show)", got)
	}
	if got := search("nothing-like-it"); len(got) != 0 {
		t.Errorf("search for nothing: %+v", got)
	}
	if got := search(`"*"`); len(got) != 0 {
		t.Errorf("search without a word: %+v", got)
	}
}

func TestSearchBadQuery(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for name, q := range map[string]string{
		"no q":          "",
		"empty q":       "?q=",
		"blank q":       "?q=%20%20",
		"too long":      "?q=" + strings.Repeat("a", 257),
		"invalid utf-8": "?q=%ff%fe",
		"unknown":       "?q=a&sort=new",
		"q twice":       "?q=a&q=b",
		"limit 0":       "?q=a&limit=0",
		"limit 51":      "?q=a&limit=51",
		"limit word":    "?q=a&limit=ten",
		"huge query":    "?q=a&x=" + strings.Repeat("b", 2000),
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(http.MethodGet, "/api/search"+q, "", nil)
			wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
		})
	}
	resp, body := h.do(http.MethodPost, "/api/search?q=a", "{}", nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
}
