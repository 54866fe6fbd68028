package chatclient

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

func TestListIssues(t *testing.T) {
	at := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
	issue := contract.Issue{
		ID: "iss_1", ConversationID: "demo", Title: "Flaky test", Body: "b", Severity: "high", Labels: []string{"ci"},
		Status: "open", CreatedAt: at, UpdatedAt: at,
		Comments: []contract.IssueComment{{ID: "cmt_1", IssueID: "iss_1", Body: "c", CreatedAt: at}},
	}
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		switch r.URL.Path {
		case "/api/conversations/demo/issues":
			httpapi.WriteJSON(w, http.StatusOK, contract.IssueList{Issues: []contract.Issue{issue}})
		default:
			httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "no conversation")
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}

	got, err := c.ListIssues(t.Context(), "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]contract.Issue{issue}, got); diff != "" {
		t.Errorf("issues (-want +got):\n%s", diff)
	}
	if _, err := c.ListIssues(t.Context(), "demo", contract.IssueClosed); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"", "status=closed"}, queries); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}
	if _, err := c.ListIssues(t.Context(), "nobody", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown conversation: %v, want ErrNotFound", err)
	}
	if _, err := c.ListIssues(t.Context(), "demo", "done"); err == nil {
		t.Error("unknown status: no error")
	}
	if _, err := c.ListIssues(t.Context(), "../x", ""); err == nil {
		t.Error("bad id: no error")
	}
}
