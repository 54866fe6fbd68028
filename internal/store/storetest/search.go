package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// searchTests are the conformance tests of the conversation search and of
// the order by last activity.
var searchTests = map[string]func(*testing.T, store.Store){
	"Search":        testSearch,
	"SearchHostile": testSearchHostile,
	"SearchTitles":  testSearchTitles,
}

func testConversationActivity(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	for i, id := range []string{"c1", "c2", "c3"} {
		_, _, err := s.CreateConversation(ctx, store.Conversation{ID: id, Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: at(time.Duration(i) * time.Hour)})
		must(t, err)
	}
	order := func(what string, want ...string) {
		t.Helper()
		for name, list := range map[string]func() ([]store.Conversation, error){
			"ListConversations":       func() ([]store.Conversation, error) { return s.ListConversations(ctx, "u1") },
			"ListTenantConversations": func() ([]store.Conversation, error) { return s.ListTenantConversations(ctx, "acme", "") },
		} {
			cs, err := list()
			must(t, err)
			var got []string
			for _, c := range cs {
				got = append(got, c.ID)
				checkUTC(t, name, c.LastActivityAt)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", name, what, diff)
			}
		}
	}
	order("at creation", "c3", "c2", "c1")
	must(t, s.TouchConversation(ctx, "c1", at(3*time.Hour)))
	order("after c1's activity", "c1", "c3", "c2")
	must(t, s.TouchConversation(ctx, "c2", at(3*time.Hour))) // the same time: ID descending
	order("after c2's at the same time", "c2", "c1", "c3")
	// An earlier time (a report that arrives late) moves nothing back.
	must(t, s.TouchConversation(ctx, "c2", at(time.Minute)))
	c, err := s.GetConversation(ctx, "c2")
	must(t, err)
	if !c.LastActivityAt.Equal(ms(at(3 * time.Hour))) {
		t.Errorf("LastActivityAt after an earlier touch = %v, want %v", c.LastActivityAt, ms(at(3*time.Hour)))
	}
	wantErr(t, "TouchConversation of an unknown conversation", s.TouchConversation(ctx, "nope", at(0)), store.ErrNotFound)
}

// searchFixture stores u1's conversations a (titled), b, c (archived) and
// u2's d, with texts.
func searchFixture(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	must(t, s.PutUser(ctx, store.User{ID: "u2", Name: "User u2", CreatedAt: t0}))
	for _, c := range []store.Conversation{
		{ID: "a", Tenant: "acme", Env: "prod", UserID: "u1", Title: "Deploy pipeline", CreatedAt: at(0)},
		{ID: "b", Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: at(time.Hour)},
		{ID: "c", Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: at(2 * time.Hour)},
		{ID: "d", Tenant: "acme", Env: "prod", UserID: "u2", CreatedAt: at(3 * time.Hour)},
	} {
		_, _, err := s.CreateConversation(ctx, c)
		must(t, err)
	}
	yes := true
	_, err := s.UpdateConversation(ctx, "c", store.ConversationChange{Archived: &yes, At: at(4 * time.Hour)})
	must(t, err)
	for _, x := range []store.ConversationText{
		{ConversationID: "a", Key: "m1", Kind: store.TextUser, Body: "How do I configure the nginx proxy?", At: at(time.Minute)},
		{ConversationID: "b", Key: "m1", Kind: store.TextUser, Body: "Why does the test fail?", At: at(time.Hour)},
		{ConversationID: "b", Key: "t1", Kind: store.TextAssistant, Body: "The flaky test was a race in the scheduler: two goroutines shared a map.", At: at(time.Hour + time.Minute)},
		{ConversationID: "c", Key: "m1", Kind: store.TextUser, Body: "Příliš žluťoučký kůň úpěl ďábelské ódy", At: at(2 * time.Hour)},
		{ConversationID: "d", Key: "m1", Kind: store.TextUser, Body: "the scheduler of someone else", At: at(3 * time.Hour)},
	} {
		added, err := s.AddConversationText(ctx, x)
		must(t, err)
		if !added {
			t.Errorf("AddConversationText %s/%s: added = false", x.ConversationID, x.Key)
		}
	}
}

// hitIDs returns the conversations of hits, in order, with the kind of
// text that matched: "b:assistant".
func hitIDs(hs []store.SearchHit) []string {
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.Conversation.ID+":"+h.Kind)
	}
	return ids
}

func testSearch(t *testing.T, s store.Store) {
	ctx := t.Context()
	searchFixture(t, s)
	tests := map[string]struct {
		user, q string
		want    []string
	}{
		"a word of a reply":           {"u1", "scheduler", []string{"b:assistant"}},
		"case":                        {"u1", "SCHEDULER", []string{"b:assistant"}},
		"the last word a prefix":      {"u1", "sched", []string{"b:assistant"}},
		"every word":                  {"u1", "race scheduler", []string{"b:assistant"}},
		"not every word":              {"u1", "scheduler nginx", nil},
		"only the last word a prefix": {"u1", "sched race", nil},
		"a word of a message":         {"u1", "nginx", []string{"a:user"}},
		"a title":                     {"u1", "deploy", []string{"a:title"}},
		"archived ones too":           {"u1", "žluťoučký", []string{"c:user"}},
		"another user's":              {"u2", "scheduler", []string{"d:user"}},
		"nobody's":                    {"u3", "scheduler", nil},
		"no word at all":              {"u1", "  !?  ", nil},
		"one hit per conversation":    {"u1", "test", []string{"b"}},
		"nothing":                     {"u1", "kubernetes", nil},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			hs, err := s.SearchConversations(ctx, tt.user, tt.q, 10)
			must(t, err)
			got := hitIDs(hs)
			if len(tt.want) == 1 && !strings.Contains(tt.want[0], ":") {
				// Either of its texts.
				for i := range got {
					got[i], _, _ = strings.Cut(got[i], ":")
				}
			}
			if diff := cmp.Diff(tt.want, got, opts); diff != "" {
				t.Errorf("SearchConversations(%s, %q) (-want +got):\n%s", tt.user, tt.q, diff)
			}
			for _, h := range hs {
				if h.Conversation.UserID != tt.user || !strings.Contains(strings.ToLower(h.Body), strings.ToLower(strings.Fields(tt.q)[0][:3])) {
					t.Errorf("hit %+v: not %s's, or its body does not hold the query", h, tt.user)
				}
				checkUTC(t, "SearchConversations", h.Conversation.CreatedAt, h.Conversation.LastActivityAt)
			}
		})
	}

	// A text given again under its key is not indexed twice.
	added, err := s.AddConversationText(ctx, store.ConversationText{ConversationID: "b", Key: "t1", Kind: store.TextAssistant, Body: "something else entirely", At: at(5 * time.Hour)})
	must(t, err)
	if added {
		t.Error("AddConversationText of a key already given: added = true")
	}
	if hs, err := s.SearchConversations(ctx, "u1", "entirely", 10); err != nil || len(hs) != 0 {
		t.Errorf("search for the text given again: %v, %v; want nothing", hitIDs(hs), err)
	}

	// Ranking: a conversation that is all about a word comes before one
	// that mentions it once in passing, whatever their activity.
	for _, x := range []store.ConversationText{
		{ConversationID: "a", Key: "t1", Kind: store.TextAssistant, Body: "Kubernetes: a Kubernetes Deployment and a Kubernetes Service.", At: at(time.Minute)},
		{ConversationID: "b", Key: "t2", Kind: store.TextAssistant, Body: "We looked at the logs, the metrics, the configuration, the build, the tests, " +
			"the database, the caches and the network, and then briefly at kubernetes, before going back to the scheduler and its locks.", At: at(time.Hour)},
	} {
		_, err := s.AddConversationText(ctx, x)
		must(t, err)
	}
	must(t, s.TouchConversation(ctx, "b", at(10*time.Hour)))
	hs, err := s.SearchConversations(ctx, "u1", "kubernetes", 10)
	must(t, err)
	if diff := cmp.Diff([]string{"a:assistant", "b:assistant"}, hitIDs(hs)); diff != "" {
		t.Errorf("ranking (-want +got):\n%s", diff)
	}
	if len(hs) == 2 && !(hs[0].Score > hs[1].Score) {
		t.Errorf("scores %v, %v: want the first higher", hs[0].Score, hs[1].Score)
	}
	hs, err = s.SearchConversations(ctx, "u1", "kubernetes", 1)
	must(t, err)
	if diff := cmp.Diff([]string{"a:assistant"}, hitIDs(hs)); diff != "" {
		t.Errorf("limit 1 (-want +got):\n%s", diff)
	}
}

// testSearchHostile searches with what a user may type that is syntax to
// one of the databases: every search answers without an error, finds what
// its words find, and changes nothing.
func testSearchHostile(t *testing.T, s store.Store) {
	ctx := t.Context()
	searchFixture(t, s)
	found := []string{"b:assistant"}
	tests := map[string]struct {
		q    string
		want []string
	}{
		"double quote":        {`"scheduler`, found},
		"quotes inside":       {`sched"uler`, nil},
		"single quote":        {`scheduler'`, found},
		"sql":                 {`'; DROP TABLE conversations; --`, nil},
		"sql with a word":     {`scheduler'); DELETE FROM conversation_texts; --`, nil},
		"star":                {`*`, nil},
		"star after":          {`sched*`, found},
		"fts near":            {`NEAR(scheduler race)`, nil},
		"fts column filter":   {`body:scheduler`, nil},
		"fts minus":           {`-scheduler`, found},
		"fts caret":           {`^scheduler`, found},
		"fts or":              {`scheduler OR nginx`, nil},
		"fts and":             {`scheduler AND`, nil},
		"fts not":             {`NOT scheduler`, nil},
		"fts parentheses":     {`(scheduler`, found},
		"tsquery operators":   {`scheduler & | ! <-> :*`, found},
		"tsquery weights":     {`scheduler:A`, found}, // "a" is a word, as a prefix: "a race"
		"backslash":           {`\scheduler\`, found},
		"percent":             {`%scheduler%`, found},
		"nul":                 {"sched\x00uler", nil},
		"invalid utf-8":       {"\xff\xfescheduler\xc3", found},
		"emoji":               {"😀", nil},
		"japanese":            {"日本語のテキスト", nil},
		"combining marks":     {"kůň", []string{"c:user"}},
		"many words":          {strings.Repeat("scheduler ", 500), found},
		"a very long word":    {strings.Repeat("s", 10000), nil},
		"control characters":  {"\x1b\x07scheduler\r\n\t", found},
		"only punctuation":    {`!"#$%&'()*+,-./:;<=>?@[\]^_{|}~`, nil},
		"only white space":    {" \t\n ", nil},
		"empty":               {"", nil},
		"right-to-left marks": {"\u202escheduler\u202c", found},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			hs, err := s.SearchConversations(ctx, "u1", tt.q, 10)
			if err != nil {
				t.Fatalf("SearchConversations(%q): %v", tt.q, err)
			}
			if diff := cmp.Diff(tt.want, hitIDs(hs), opts); diff != "" {
				t.Errorf("SearchConversations(%q) (-want +got):\n%s", tt.q, diff)
			}
		})
	}
	cs, err := s.ListConversations(ctx, "u1")
	must(t, err)
	hs, err := s.SearchConversations(ctx, "u1", "nginx", 10)
	must(t, err)
	if len(cs) != 3 || len(hs) != 1 {
		t.Errorf("after the hostile searches: %d conversations, %d hits for nginx; want 3 and 1", len(cs), len(hs))
	}
}

// testSearchTitles: a title is found by its words until it changes, and
// then by the new one's; a generated title does not replace the user's.
func testSearchTitles(t *testing.T, s store.Store) {
	ctx := t.Context()
	searchFixture(t, s)
	find := func(q string, want ...string) {
		t.Helper()
		hs, err := s.SearchConversations(ctx, "u1", q, 10)
		must(t, err)
		if diff := cmp.Diff(want, hitIDs(hs), opts); diff != "" {
			t.Errorf("SearchConversations(%q) (-want +got):\n%s", q, diff)
		}
	}
	title := func(s string) *string { return &s }
	find("pipeline", "a:title")
	_, err := s.UpdateConversation(ctx, "a", store.ConversationChange{Title: title("Release train"), At: at(time.Hour)})
	must(t, err)
	find("pipeline")
	find("release train", "a:title")
	_, err = s.UpdateConversation(ctx, "a", store.ConversationChange{Title: title("Generated name"), Untitled: true, At: at(2 * time.Hour)})
	must(t, err)
	find("generated")
	find("release", "a:title")
	_, err = s.UpdateConversation(ctx, "b", store.ConversationChange{Title: title("Flaky scheduler test"), Untitled: true, At: at(2 * time.Hour)})
	must(t, err)
	find("flaky", "b:title")
	_, err = s.UpdateConversation(ctx, "b", store.ConversationChange{Title: title("")})
	must(t, err)
	find("flaky", "b:assistant") // the reply still says it
}
