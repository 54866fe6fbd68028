//go:build !linux

package rawio

import (
	"net"
	"testing"
)

// raw skips the test: the raw reads and writes are Linux only.
func raw(t *testing.T, _ net.Conn) {
	t.Helper()
	t.Skip("raw reads and writes are Linux only")
}
