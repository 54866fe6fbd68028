package headlimit

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReader(t *testing.T) {
	tooLarge := errors.New("too large")
	l := &Reader{R: strings.NewReader("abcdefgh"), Left: 3, Err: tooLarge}
	b, err := io.ReadAll(l)
	if string(b) != "abc" || !errors.Is(err, tooLarge) {
		t.Fatalf("bounded: %q, %v", b, err)
	}
	l.Left = -1
	if b, err := io.ReadAll(l); string(b) != "defgh" || err != nil {
		t.Fatalf("unbounded: %q, %v", b, err)
	}
}
