package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A sandbox without a network of its own reaches the proxy over a unix
// socket: everything a TCP client can do works there too, and the URL the
// sandbox gets names the TCP address of its relay, not the socket.
func TestServeUnixSocket(t *testing.T) {
	secure, plain := greeters(t, "hello over")
	echo := echoServer(t)
	list, err := ParseAllowList([]byte(loopbackAllowList(secure.Listener.Addr().(*net.TCPAddr).Port, plain.Listener.Addr().(*net.TCPAddr).Port, echo.port)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	s := New(list, testCapability, &Options{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }() // ends at the Shutdown below
	shutdown := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve after Shutdown: %v, want nil", err)
		}
	}
	shutdownOnce := false
	t.Cleanup(func() {
		if !shutdownOnce {
			shutdown()
		}
	})
	dialSock := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	// tunnel opens a CONNECT tunnel to the echo server over the socket,
	// with first sent right behind the request, and reads the proxy's 200.
	tunnel := func(t *testing.T, first string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := dialSock(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		dest := fmt.Sprintf("127.0.0.1:%d", echo.port)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n%s", dest, dest, authFor("conv-unix"), first)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT over the socket: %v %v", resp, err)
		}
		return c, br
	}

	// The address is the relay's inside the sandbox; the transport below
	// dials the socket whatever address it is asked for, as that relay would.
	const relay = "127.0.0.1:3128"
	client := func(proxy string) *http.Client {
		u, err := url.Parse(proxy)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{
			Proxy:           http.ProxyURL(u),
			DialContext:     dialSock,
			TLSClientConfig: secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 20 * time.Second}
	}
	proxyURL := s.URLForAddr("conv-unix", relay)
	if want := "http://conv-unix:" + testCapability("conv-unix") + "@" + relay; proxyURL != want {
		t.Errorf("URLForAddr = %q, want %q", proxyURL, want)
	}
	good := client(proxyURL)

	t.Run("Go client", func(t *testing.T) {
		for _, tc := range []struct{ url, want string }{
			{secure.URL + "/a", "hello over https"},
			{plain.URL + "/b", "hello over http"},
		} {
			resp, err := good.Get(tc.url)
			if err != nil {
				t.Fatalf("GET %s: %v", tc.url, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != tc.want {
				t.Errorf("GET %s: %s %q, want %q", tc.url, resp.Status, b, tc.want)
			}
		}
		if _, err := good.Get("https://registry.example/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("GET an unlisted host: err = %v, want the proxy's 403", err)
		}
		wrong := client(strings.Replace(proxyURL, "conv-unix:", "conv-other:", 1))
		if _, err := wrong.Get(secure.URL + "/c"); err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
			t.Errorf("GET with another conversation's id: err = %v, want the proxy's 407", err)
		}
	})

	t.Run("a tunnel half-closes over the socket", func(t *testing.T) {
		c, br := tunnel(t, "ping")
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(br)
		if err != nil || string(rest) != "ping" {
			t.Fatalf("echoed %q, %v; want %q and a clean end", rest, err, "ping")
		}
	})

	if st := s.Stats(); st.Tunnels != 2 || st.Requests != 1 || st.Refused != 1 || st.Unauthenticated != 1 {
		t.Errorf("stats = %+v, want 2 tunnels, 1 request, 1 refused, 1 unauthenticated", st)
	}
	if a, ok := s.Addr().(*net.UnixAddr); !ok || a.Name != sock {
		t.Errorf("Addr = %v, want the socket", s.Addr())
	}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("URLFor with no TCP listener did not panic")
			}
		}()
		s.URLFor("conv-unix")
	}()

	// A tunnel open at Shutdown is closed by it.
	_, tbr := tunnel(t, "")
	shutdownOnce = true
	shutdown()
	if _, err := io.ReadAll(tbr); isTimeout(err) {
		t.Error("the tunnel is still open after Shutdown")
	}
	// The socket file goes with the listener, so the next worker can bind it.
	if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket file after Shutdown: %v, want it removed", err)
	}
	ln2, err := net.Listen("unix", filepath.Join(t.TempDir(), "again.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v, want ErrServerClosed", err)
	}
	if strings.Contains(logs.String(), "tlp_") {
		t.Errorf("the log contains a capability:\n%s", logs.String())
	}
}
