// Package modelimage decides whether a file can be shown to the model as
// an image content block: its type sniffed from the bytes, never the name,
// and its size and dimensions within the Messages API's limits.
package modelimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // registers the decoders DecodeConfig reads headers with
	_ "image/jpeg"
	_ "image/png"
	"net/http"

	"github.com/talkide/platform/internal/contract"
)

// ErrNotImage is a file that is not a PNG, JPEG, GIF or WebP image.
var ErrNotImage = errors.New("not a PNG, JPEG, GIF or WebP image")

// ErrTooLarge is an image larger than the model is shown.
var ErrTooLarge = errors.New("image too large for the model")

// Sniff returns the media type of data when it is an image the model can
// be shown: image/png, image/jpeg, image/gif or image/webp, at most
// contract.MaxImageBytes, with a header that parses and sides of at most
// contract.MaxImageSide pixels. Only the header is decoded.
func Sniff(data []byte) (string, error) {
	mt := http.DetectContentType(data)
	var w, h int
	switch mt {
	case "image/png", "image/jpeg", "image/gif":
		cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return "", fmt.Errorf("%w: a %s header that does not parse: %v", ErrNotImage, mt, err)
		}
		w, h = cfg.Width, cfg.Height
	case "image/webp":
		var err error
		if w, h, err = webpSize(data); err != nil {
			return "", err
		}
	default:
		return "", ErrNotImage
	}
	switch {
	case len(data) > contract.MaxImageBytes:
		return "", fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(data), contract.MaxImageBytes)
	case w < 1 || h < 1:
		return "", fmt.Errorf("%w: %s of %d×%d pixels", ErrNotImage, mt, w, h)
	case w > contract.MaxImageSide || h > contract.MaxImageSide:
		return "", fmt.Errorf("%w: %d×%d pixels, more than %d on a side", ErrTooLarge, w, h, contract.MaxImageSide)
	}
	return mt, nil
}

// webpSize reads a WebP file's canvas size from its first chunk: VP8X
// (extended), VP8L (lossless) or VP8 (lossy).
func webpSize(b []byte) (int, int, error) {
	bad := fmt.Errorf("%w: a WebP header that does not parse", ErrNotImage)
	if len(b) < 30 {
		return 0, 0, bad
	}
	chunk, p := string(b[12:16]), b[20:]
	switch chunk {
	case "VP8X":
		w := int(p[4]) | int(p[5])<<8 | int(p[6])<<16
		h := int(p[7]) | int(p[8])<<8 | int(p[9])<<16
		return w + 1, h + 1, nil
	case "VP8L":
		if p[0] != 0x2f {
			return 0, 0, bad
		}
		v := binary.LittleEndian.Uint32(p[1:5])
		return int(v&0x3fff) + 1, int(v>>14&0x3fff) + 1, nil
	case "VP8 ":
		if p[3] != 0x9d || p[4] != 0x01 || p[5] != 0x2a {
			return 0, 0, bad
		}
		return int(binary.LittleEndian.Uint16(p[6:8]) & 0x3fff), int(binary.LittleEndian.Uint16(p[8:10]) & 0x3fff), nil
	}
	return 0, 0, bad
}
