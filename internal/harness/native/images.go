package native

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/modelimage"
	"github.com/talkide/platform/internal/tools"
)

// maxTurnImageBytes bounds the image bytes one user message carries: in
// base64 they stay well under a transcript record's 16 MiB, and leave
// room in the gateway's 32 MiB request for the rest of the conversation.
const maxTurnImageBytes = 8 << 20

// userBlocks is the content of the turn's user message: its text, then an
// image block for each attachment that is an image the model can be shown,
// read from the workspace through the file tools' confinement. An
// attachment that is not such an image stays a file the text names; one
// that cannot be read, or would pass maxTurnImageBytes, is said so in a
// note after the text, so that the model does not believe it saw it.
func userBlocks(t *harness.Turn, ws *tools.Workspace, log *slog.Logger) []wireBlock {
	blocks := []wireBlock{{Type: "text", Text: t.Text}}
	var notes string
	total := 0
	for _, p := range t.Attachments {
		data, _, err := ws.ReadFile(p, contract.MaxImageBytes)
		if err != nil {
			var tooLarge *tools.TooLargeError
			if !errors.As(err, &tooLarge) {
				log.Info("attachment not readable", "path", p, "err", err)
				notes += fmt.Sprintf("\n[attachment %s could not be read: %v]", p, err)
			}
			continue // too large to be an image block: a file the text names
		}
		mt, err := modelimage.Sniff(data)
		if err != nil {
			continue
		}
		if total+len(data) > maxTurnImageBytes {
			notes += fmt.Sprintf("\n[image %s is not shown: the message's images pass %d MiB]", p, maxTurnImageBytes>>20)
			continue
		}
		total += len(data)
		blocks = append(blocks, wireBlock{Type: "image", Source: &harness.ImageSource{Type: "base64", MediaType: mt, Data: base64.StdEncoding.EncodeToString(data)}})
	}
	if notes != "" {
		blocks[0].Text += "\n" + notes
	}
	return blocks
}

// imageTokens is what an image costs at most, in tokens: the Messages API
// scales an image down to about 1.15 megapixels, some 1,600 tokens.
const imageTokens = 1600

// imageDiscount is the bytes of rec's images' base64 data less what they
// cost as text would be (4 bytes a token), so that estimateTokens counts
// an image as the tokens it costs rather than as its bytes, which would
// make a single photo look like a context window.
func imageDiscount(rec json.RawMessage) int {
	if !bytes.Contains(rec, []byte(`"source"`)) {
		return 0
	}
	var m wireMessage
	if json.Unmarshal(rec, &m) != nil {
		return 0
	}
	d := 0
	for _, b := range m.Content {
		if b.Source != nil {
			d += len(b.Source.Data) - 4*imageTokens
		}
	}
	return d
}
