package fdlimit_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/fdlimit"
)

func TestRaise(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	if orig.Max < 512 {
		t.Skipf("the hard limit is %d", orig.Max)
	}
	// As a login shell leaves it: a soft limit below the hard one.
	low := syscall.Rlimit{Cur: 256, Max: orig.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	n, err := fdlimit.Raise()
	if err != nil {
		t.Fatal(err)
	}
	if n != orig.Max {
		t.Errorf("Raise = %d, want the hard limit %d", n, orig.Max)
	}
	if cur, _ := fdlimit.Current(); cur != orig.Max {
		t.Errorf("Current = %d after Raise, want %d", cur, orig.Max)
	}
	// Already at the hard limit: nothing to do.
	if n, err := fdlimit.Raise(); err != nil || n != orig.Max {
		t.Errorf("Raise again = %d, %v", n, err)
	}
}

func TestReserve(t *testing.T) {
	for limit, want := range map[uint64]int{1024: 768, 20000: 18976, 1 << 20: 1<<20 - 1024, 64: 48} {
		if got := fdlimit.MaxConns(limit); got != want {
			t.Errorf("MaxConns(%d) = %d, want %d", limit, got, want)
		}
	}
}

// TestListenerSheds checks that connections beyond the bound are told 503
// in the API's JSON shape and closed, that the ones within it are served,
// and that a closed connection's slot is free again.
func TestListenerSheds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bl := fdlimit.Listen(ln, 2)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(bl)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	get := func(c net.Conn) (*http.Response, error) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		return http.ReadResponse(bufio.NewReader(c), nil)
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp, err := get(c) // served: the connection is accepted and counted
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("within the bound: %v %v", resp, err)
		}
		held = append(held, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := get(c)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("the refusal's body: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || body.Error.Code != "unavailable" {
		t.Errorf("beyond the bound: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the refused connection stays open")
	}
	if bl.Shed() != 1 || bl.Open() != 2 {
		t.Errorf("Shed = %d, Open = %d; want 1, 2", bl.Shed(), bl.Open())
	}
	held[0].Close()
	for deadline := time.Now().Add(10 * time.Second); bl.Open() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Open = %d after a close", bl.Open())
		}
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if resp, err := get(c2); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("after a slot was freed: %v %v", resp, err)
	}
}

// TestConnCloseWrite: an accepted connection can shut its sending side
// alone (the client reads EOF and can still send), as the TCP connection
// under it can.
func TestConnCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bl := fdlimit.Listen(ln, 2)
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := bl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	cw, ok := server.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the accepted connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the client read %d, %v; want EOF", n, err)
	}
	if _, err := io.WriteString(client, "still open"); err != nil {
		t.Fatal(err)
	}
	server.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 10)
	if _, err := io.ReadFull(server, b); err != nil || string(b) != "still open" {
		t.Fatalf("the server read %q, %v", b, err)
	}
}
