package gateway

import (
	"bytes"
	"encoding/json"
)

// imageTokens is what an image costs at most, in tokens: the Messages API
// scales an image down to about 1.15 megapixels, some 1,600 tokens.
const imageTokens = 1600

// promptBytes is the size of a Messages request body as the budget's
// estimate reads it (four bytes a token), with each base64 image counted
// as the tokens it costs rather than its bytes: a 5 MiB screenshot is some
// 1,600 tokens, not 1.7 million, and a reservation sized from its bytes
// would refuse the call under any modest limit. Only a body that holds an
// image is decoded.
func promptBytes(body []byte) int64 {
	n := int64(len(body))
	if !bytes.Contains(body, []byte(`"base64"`)) {
		return n
	}
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return n
	}
	for _, m := range req.Messages {
		var blocks []struct {
			Type   string `json:"type"`
			Source *struct {
				Type string `json:"type"`
				Data string `json:"data"`
			} `json:"source"`
		}
		if len(m.Content) == 0 || m.Content[0] != '[' || json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "image" && b.Source != nil && b.Source.Type == "base64" {
				n -= max(int64(len(b.Source.Data))-4*imageTokens, 0)
			}
		}
	}
	return n
}
