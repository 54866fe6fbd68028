package egress

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/fakeclock"
)

func basic(userpass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(userpass))
}

func TestParseProxyAuth(t *testing.T) {
	tests := map[string]struct {
		values            []string
		wantConv, wantCap string
		wantReason        string
	}{
		"good":                 {values: []string{basic("conv-1:tlp_abc")}, wantConv: "conv-1", wantCap: "tlp_abc"},
		"scheme in any case":   {values: []string{"bAsIc " + base64.StdEncoding.EncodeToString([]byte("c:x"))}, wantConv: "c", wantCap: "x"},
		"colon in capability":  {values: []string{basic("c:a:b")}, wantConv: "c", wantCap: "a:b"},
		"none":                 {wantReason: reasonNoCredential},
		"two headers":          {values: []string{basic("c:x"), basic("c:x")}, wantReason: reasonMalformedCredential},
		"bearer":               {values: []string{"Bearer tlp_abc"}, wantReason: reasonMalformedCredential},
		"no space":             {values: []string{"Basic"}, wantReason: reasonMalformedCredential},
		"not base64":           {values: []string{"Basic !!!"}, wantReason: reasonMalformedCredential},
		"no colon":             {values: []string{basic("conv-1")}, wantReason: reasonMalformedCredential},
		"empty capability":     {values: []string{basic("conv-1:")}, wantReason: reasonMalformedCredential},
		"empty conversation":   {values: []string{basic(":tlp_abc")}, wantReason: reasonMalformedCredential},
		"invalid conversation": {values: []string{basic("../etc:tlp_abc")}, wantReason: reasonMalformedCredential},
		"too long":             {values: []string{basic("c:" + strings.Repeat("x", maxCredentialLen))}, wantReason: reasonMalformedCredential},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add("Proxy-Authorization", v)
			}
			conv, capability, reason := parseProxyAuth(h)
			if diff := cmp.Diff([]string{tc.wantConv, tc.wantCap, tc.wantReason}, []string{conv, capability, reason}); diff != "" {
				t.Errorf("parseProxyAuth (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseProxyAuth checks that whatever a client sends, the parser either
// refuses it or returns a valid conversation id and a non-empty capability.
func FuzzParseProxyAuth(f *testing.F) {
	for _, seed := range []string{basic("conv-1:tlp_abc"), basic(":"), "Basic", "Basic =", "basic Y29udjp4", "Bearer x", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		conv, capability, reason := parseProxyAuth(http.Header{"Proxy-Authorization": {v}})
		if reason != "" {
			if conv != "" || capability != "" {
				t.Fatalf("refused (%s) but returned %q, %q", reason, conv, capability)
			}
			return
		}
		if conv == "" || capability == "" || strings.ContainsAny(conv, ":/.") {
			t.Fatalf("accepted %q as conversation %q, capability %q", v, conv, capability)
		}
	})
}

func TestNonPublic(t *testing.T) {
	tests := map[string]string{ // address: kind, "" for public
		"127.0.0.1":                "loopback",
		"127.255.0.9":              "loopback",
		"::1":                      "loopback",
		"::ffff:127.0.0.1":         "loopback",
		"10.1.2.3":                 "private",
		"172.16.0.1":               "private",
		"172.31.255.255":           "private",
		"192.168.1.1":              "private",
		"::ffff:192.168.1.1":       "private",
		"fc00::1":                  "private",
		"fd12:3456::1":             "private",
		"169.254.169.254":          "link-local",
		"fe80::1":                  "link-local",
		"fe80::1%eth0":             "link-local",
		"0.0.0.0":                  "unspecified",
		"::":                       "unspecified",
		"224.0.0.1":                "multicast",
		"239.1.2.3":                "multicast",
		"ff02::1":                  "multicast",
		"ff0e::1":                  "multicast",
		"0.1.2.3":                  "reserved",
		"100.64.0.1":               "reserved",
		"100.100.100.200":          "reserved",
		"255.255.255.255":          "reserved",
		"240.0.0.1":                "reserved",
		"198.18.0.1":               "reserved",
		"::7f00:1":                 "reserved",
		"64:ff9b::7f00:1":          "loopback (NAT64)",
		"64:ff9b::a9fe:a9fe":       "link-local (NAT64)",
		"64:ff9b::808:808":         "",
		"64:ff9b:1::1":             "reserved",
		"fec0::1":                  "reserved",
		"8.8.8.8":                  "",
		"172.32.0.1":               "",
		"1.1.1.1":                  "",
		"::ffff:8.8.8.8":           "",
		"2606:4700:4700::1111":     "",
		"2a00:1450:4001:81c::200e": "",
	}
	for addr, want := range tests {
		a := netip.MustParseAddr(addr)
		if got := nonPublic(a); got != want {
			t.Errorf("nonPublic(%s) = %q, want %q", addr, got, want)
		}
	}
	if nonPublic(netip.Addr{}) != "invalid" {
		t.Error("the zero address is public")
	}
}

// The Control hook refuses the address actually dialled, before connecting,
// whatever the resolution before it said: a dialer that (re)resolves names
// cannot get past it.
func TestConnectControlHook(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	go func() { // accepts and closes whatever arrives; ends with ln
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	var mu sync.Mutex
	var chained []string // guarded by mu: addresses the template's Control saw
	d := &dialer{resolver: net.DefaultResolver, timeout: 5 * time.Second, template: net.Dialer{
		Control: func(network, address string, c syscall.RawConn) error {
			mu.Lock()
			defer mu.Unlock()
			chained = append(chained, address)
			return nil
		},
	}}
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	ctx := context.Background()

	_, err = d.connect(ctx, loop, port, false)
	if !errors.Is(err, ErrNonPublicAddress) {
		t.Fatalf("connect to loopback without private: err = %v, want ErrNonPublicAddress", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) || opErr.Op != "dial" {
		t.Errorf("err = %#v, want the dial's own error (refused in the Control hook)", err)
	}
	mu.Lock()
	if len(chained) != 0 {
		t.Errorf("the template's Control ran for a refused address: %v", chained)
	}
	mu.Unlock()

	c, err := d.connect(ctx, loop, port, true)
	if err != nil {
		t.Fatalf("connect with private: %v", err)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{ln.Addr().String()}, chained); diff != "" {
		t.Errorf("template Control calls (-want +got):\n%s", diff)
	}
}

func TestLogLimiter(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	l := newLogLimiter(clk.Now, time.Minute, 3)
	var got []string
	try := func(key string) {
		ok, suppressed := l.allow(key)
		if ok {
			got = append(got, key+":"+strings.Repeat("s", suppressed))
		}
	}
	for range 10 {
		try("a")
	}
	try("b")
	clk.Advance(30 * time.Second)
	try("a")
	clk.Advance(31 * time.Second)
	try("a")
	try("a")
	want := []string{"a:", "a:", "a:", "b:", "a:" + strings.Repeat("s", 8), "a:"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines let through (-want +got):\n%s", diff)
	}
}

func TestLogLimiterPrunes(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	l := newLogLimiter(clk.Now, time.Minute, 1)
	for i := range maxLogKeys {
		l.allow(strconv.Itoa(i))
	}
	clk.Advance(2 * time.Minute)
	l.allow("new")
	if n := len(l.windows); n != 1 {
		t.Errorf("%d windows after the old ones ended, want 1", n)
	}
}

func TestSlots(t *testing.T) {
	s := newSlots(2, 3)
	a1, err := s.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("a"); !errors.Is(err, errConversationLimit) {
		t.Fatalf("third for a: err = %v, want errConversationLimit", err)
	}
	b1, err := s.acquire("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("c"); !errors.Is(err, errTotalLimit) {
		t.Fatalf("fourth in all: err = %v, want errTotalLimit", err)
	}
	a1()
	a1() // a second release is a no-op
	if _, err := s.acquire("c"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	a2()
	b1()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != 1 || len(s.byConv) != 1 {
		t.Errorf("open = %d, byConv = %v; want 1 and only c", s.open, s.byConv)
	}
}

// errNotConnecting stops a dial in the Control hook, before the connect
// system call: no packet leaves for the public address the test names.
var errNotConnecting = errors.New("the test does not connect")

// A name whose answers mix public and non-public addresses is dialled on
// the public ones only, and one with nothing public is refused.
func TestDialSkipsNonPublicAddresses(t *testing.T) {
	var mu sync.Mutex
	var tried []string // guarded by mu: the addresses the dialer reached the hook with
	d := &dialer{
		resolver: fakeResolver{
			"mixed.test":   addrs("127.0.0.1", "8.8.8.8", "10.0.0.1", "::ffff:169.254.169.254"),
			"private.test": addrs("127.0.0.1", "fd00::1"),
		},
		timeout: 5 * time.Second,
		template: net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
			mu.Lock()
			defer mu.Unlock()
			tried = append(tried, address)
			return errNotConnecting
		}},
	}
	ctx := context.Background()
	if _, err := d.dial(ctx, target{host: "mixed.test", port: 443}, false); !errors.Is(err, errNotConnecting) {
		t.Fatalf("dial mixed.test: %v, want the hook's error", err)
	}
	mu.Lock()
	if diff := cmp.Diff([]string{"8.8.8.8:443"}, tried); diff != "" {
		t.Errorf("addresses dialled (-want +got):\n%s", diff)
	}
	tried = nil
	mu.Unlock()
	if _, err := d.dial(ctx, target{host: "private.test", port: 443}, false); !errors.Is(err, ErrNonPublicAddress) {
		t.Errorf("dial private.test: %v, want ErrNonPublicAddress", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tried) != 0 {
		t.Errorf("dialled %v for a name with no public address", tried)
	}
}
