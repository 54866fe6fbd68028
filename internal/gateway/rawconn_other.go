//go:build !linux

package gateway

// Elsewhere a raw connection reads and writes as net does.

func (c *rawConn) Read(p []byte) (int, error)  { return c.Conn.Read(p) }
func (c *rawConn) Write(p []byte) (int, error) { return c.Conn.Write(p) }

func (c *rawConn) bindOps() {}
