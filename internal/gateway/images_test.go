package gateway

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestPromptBytes(t *testing.T) {
	img := func(n int) string {
		return `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"}}`
	}
	text := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`
	withImages := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"text","text":"look"},` + img(3<<20) + `,` + img(30) + `]}]}`
	quoted := `{"messages":[{"role":"user","content":"\"base64\""}]}`
	tests := map[string]struct {
		body     string
		min, max int64
	}{
		"text only":          {text, int64(len(text)), int64(len(text))},
		"a large image":      {withImages, 4 * imageTokens, 4*imageTokens + 300},
		"base64 in the text": {quoted, int64(len(quoted)), int64(len(quoted))},
		"not JSON":           {`"base64" {`, 10, 10},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := promptBytes([]byte(tc.body)); got < tc.min || got > tc.max {
				t.Errorf("promptBytes = %d, want %d…%d (body %d bytes)", got, tc.min, tc.max, len(tc.body))
			}
		})
	}
	if strings.Count(withImages, "base64") != 2 {
		t.Fatal("the fixture changed")
	}
}
