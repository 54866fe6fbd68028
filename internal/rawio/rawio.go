// Package rawio reads and writes sockets without entering the Go
// runtime's system-call state.
//
// A Read or Write through the net package is a system call made with
// syscall.Syscall, which tells the scheduler the goroutine may block and,
// whenever the runtime's monitor thread (sysmon) sleeps because every P is
// idle, wakes that thread. A proxy whose streams wait for the model between
// events is idle between them, so each event's read and write woke the
// monitor, which then polled every 20 µs for a while before it slept
// again: a profile of the control-plane at 64 paced streams had 14 % of
// its CPU in sysmon. A non-blocking socket's read or write never blocks,
// so it can be made with syscall.RawSyscall instead; when the socket is not
// ready the goroutine waits on the runtime's poller exactly as the net
// package's Read and Write do (syscall.RawConn), with deadlines and Close
// working as before.
package rawio

import "net"

// Listen returns l with every accepted connection wrapped by Wrap.
func Listen(l net.Listener) net.Listener { return listener{l} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
