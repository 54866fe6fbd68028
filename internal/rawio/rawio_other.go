//go:build !linux

package rawio

import "net"

// Wrap returns c: the raw reads and writes are written for Linux only.
func Wrap(c net.Conn) net.Conn { return c }
