//go:build !linux

package rawio

import "net"

// Wrap returns c: the raw reads and writes are written for Linux only.
func Wrap(c net.Conn) net.Conn { return c }

// Hold does nothing here: reads are the net package's.
func Hold(net.Conn) {}

// Release does nothing here.
func Release(net.Conn) {}
