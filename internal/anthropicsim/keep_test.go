package anthropicsim

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRequestsKeepsOnlyTheMostRecent(t *testing.T) {
	sim := New("k", &Options{KeepRequests: 2})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	for i := 0; i < 7; i++ {
		body := fmt.Sprintf(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"n%d"}]}`, i)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := sim.Requests()
	if len(got) != 2 || !strings.Contains(string(got[0]), "n5") || !strings.Contains(string(got[1]), "n6") {
		t.Fatalf("Requests() = %q", got)
	}
}
