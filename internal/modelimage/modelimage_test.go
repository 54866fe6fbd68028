package modelimage

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"
)

func encoded(t *testing.T, enc func(*bytes.Buffer, image.Image) error, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := enc(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestSniff(t *testing.T) {
	pngOf := func(b *bytes.Buffer, i image.Image) error { return png.Encode(b, i) }
	jpegOf := func(b *bytes.Buffer, i image.Image) error { return jpeg.Encode(b, i, nil) }
	gifOf := func(b *bytes.Buffer, i image.Image) error { return gif.Encode(b, i, nil) }
	webpLossless := []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x07\xc0\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	tests := map[string]struct {
		data []byte
		want string
		err  error
	}{
		"png":                 {encoded(t, pngOf, 4, 3), "image/png", nil},
		"jpeg":                {encoded(t, jpegOf, 4, 3), "image/jpeg", nil},
		"gif":                 {encoded(t, gifOf, 4, 3), "image/gif", nil},
		"webp lossless":       {webpLossless, "image/webp", nil},
		"text":                {[]byte("hello, world\n"), "", ErrNotImage},
		"png magic, no image": {[]byte("\x89PNG\r\n\x1a\nthis is not an image at all"), "", ErrNotImage},
		"webp magic, short":   {[]byte("RIFF\x00\x00\x00\x00WEBPVP8 "), "", ErrNotImage},
		"too wide":            {encoded(t, pngOf, 8001, 1), "", ErrTooLarge},
		"empty":               {nil, "", ErrNotImage},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Sniff(tc.data)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("Sniff = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func FuzzSniff(f *testing.F) {
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Add([]byte("RIFF\x1a\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("GIF89a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		mt, err := Sniff(data)
		if (err == nil) == (mt == "") {
			t.Fatalf("Sniff = %q, %v", mt, err)
		}
	})
}
