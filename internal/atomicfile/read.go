package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is a file ReadFile refused for its size.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads the file at path whole, as WriteFile writes it, refusing
// one larger than max bytes: a small settings file named by mistake must
// not be read into memory whatever its size.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, max)
	}
	return b, nil
}
