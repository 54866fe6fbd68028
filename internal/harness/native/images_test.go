package native

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/harness"
)

// TestImageAttachment: an attached image reaches the model as an image
// block of the user message, read from the workspace; a file that only
// claims to be an image, a text file and a missing one do not.
func TestImageAttachment(t *testing.T) {
	f := newFixture(t, nil, nil)
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewGray(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"attachments/shot.png": img.Bytes(),
		"attachments/fake.png": []byte("\x89PNG\r\n\x1a\nnot an image"),
		"attachments/log.txt":  []byte("a log\n"),
	}
	for p, data := range files {
		if err := os.MkdirAll(filepath.Join(f.workspace, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.workspace, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &sink{}
	turn := f.turn("look at this\nAttached: attachments/shot.png (75 B)", s)
	turn.Attachments = []string{"attachments/shot.png", "attachments/fake.png", "attachments/log.txt", "attachments/gone.png"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.h.RunTurn(ctx, turn); err != nil {
		t.Fatal(err)
	}
	var sent wireMessage
	if err := json.Unmarshal(f.lastRequestMessages(t)[0], &sent); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, b := range sent.Content {
		types = append(types, b.Type)
	}
	if d := cmp.Diff([]string{"text", "image"}, types); d != "" {
		t.Fatalf("user message blocks (-want +got):\n%s", d)
	}
	want := harness.ImageSource{Type: "base64", MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(img.Bytes())}
	if d := cmp.Diff(&want, sent.Content[1].Source); d != "" {
		t.Errorf("image source (-want +got):\n%s", d)
	}
	if !strings.Contains(sent.Content[0].Text, "attachments/gone.png could not be read") {
		t.Errorf("the text does not say the missing attachment was not read: %q", sent.Content[0].Text)
	}
	msgs := s.Events()
	if reply := msgs[len(msgs)-2].Text; !strings.Contains(reply, "saw 1 image (image/png, ") {
		t.Errorf("the simulated model did not see the image: %q", reply)
	}
	// The transcript keeps the block, so the next turn still shows it,
	// and an image counts as the tokens it costs, not as its bytes.
	recs := f.records(t)
	if !strings.Contains(string(recs[0]), want.Data) {
		t.Error("the transcript lost the image")
	}
	if got := estimateTokens(recs[:1]); got > imageTokens+200 {
		t.Errorf("estimateTokens = %d for a short text and one small image", got)
	}
	validateHistory(t, recs)
}

// TestImageDiscount: a large image is estimated at imageTokens, not at its
// base64 bytes over four.
func TestImageDiscount(t *testing.T) {
	data := base64.StdEncoding.EncodeToString(make([]byte, 3<<20))
	rec, _ := json.Marshal(wireMessage{Role: "user", Content: []wireBlock{{Type: "text", Text: "hi"}, {Type: "image", Source: &harness.ImageSource{Type: "base64", MediaType: "image/png", Data: data}}}})
	if got := estimateTokens([]json.RawMessage{rec}); got < imageTokens || got > imageTokens+100 {
		t.Errorf("estimateTokens = %d, want about %d", got, imageTokens)
	}
}
