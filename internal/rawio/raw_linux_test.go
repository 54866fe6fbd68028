package rawio

import (
	"net"
	"testing"
)

// raw fails the test unless Wrap made c raw.
func raw(t *testing.T, c net.Conn) {
	t.Helper()
	if _, ok := c.(*conn); !ok {
		t.Fatalf("Wrap gave %T, want *conn", c)
	}
}
