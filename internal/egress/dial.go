package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// ErrNonPublicAddress is wrapped by the error of a connection the proxy
// refused because the address is loopback, private, link-local or otherwise
// not a public unicast address, and the allow-list entry does not allow
// private addresses.
var ErrNonPublicAddress = errors.New("non-public address")

// errNoAddress is a name that resolved to nothing the proxy may dial.
var errNoAddress = errors.New("the name has no address")

// Resolver looks up the addresses of a host name; *net.Resolver is one. It
// must be safe for concurrent use.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// reservedPrefixes are the ranges outside netip's own predicates
// (loopback, private, link-local, multicast, unspecified) that are not
// public destinations either: a name resolving into them reaches something
// of the deployment's own network, or nothing.
var reservedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (carrier-grade NAT; some clouds' metadata)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the broadcast address
	netip.MustParsePrefix("::/96"),           // IPv4-compatible IPv6 (deprecated)
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// nat64 is the well-known NAT64 prefix: its addresses reach the IPv4
// address in their last 32 bits, so they are as public as that one.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// nonPublic names the kind of a's range when a is not a public unicast
// address ("loopback", "private", …), and is "" for a public one.
func nonPublic(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		if k := nonPublic(netip.AddrFrom4([4]byte(b[12:]))); k != "" {
			return k + " (NAT64)"
		}
		return ""
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private"
	}
	for _, p := range reservedPrefixes {
		if p.Contains(a) {
			return "reserved"
		}
	}
	return ""
}

// nonPublicError is the refusal of one address.
func nonPublicError(a netip.Addr, kind string) error {
	return fmt.Errorf("%w: %s is %s", ErrNonPublicAddress, a, kind)
}

// dialer connects to a destination the allow-list allowed, on an address
// the proxy resolved and checked itself.
type dialer struct {
	resolver Resolver
	template net.Dialer // copied for each connection; its Control hooks run after the check
	timeout  time.Duration
}

// dial resolves t and connects to one of its addresses, within d.timeout.
// Unless allowPrivate, it refuses every address that is not public, both
// before dialling and, in the socket's Control hook, on the address
// actually dialled: whatever resolves a name again on the way (a Dialer of
// the caller's, a rebinding DNS server) cannot slip a private address in.
func (d *dialer) dial(ctx context.Context, t target, allowPrivate bool) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	addrs := []netip.Addr{t.ip}
	if !t.ip.IsValid() {
		var err error
		addrs, err = d.resolver.LookupNetIP(ctx, "ip", t.host)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", t.host, err)
		}
	}
	var usable []netip.Addr
	var refused error
	for _, a := range addrs {
		a = a.Unmap()
		if k := nonPublic(a); k != "" && !allowPrivate {
			if refused == nil {
				refused = nonPublicError(a, k)
			}
			continue
		}
		if a.Zone() != "" {
			continue // a zone makes sense only for a link-local address
		}
		usable = append(usable, a)
	}
	if len(usable) == 0 {
		if refused != nil {
			return nil, fmt.Errorf("%s: %w", t.host, refused)
		}
		return nil, fmt.Errorf("%s: %w", t.host, errNoAddress)
	}
	c, err := d.connect(ctx, usable, t.port, allowPrivate)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", t.hostPort(), err)
	}
	return c, nil
}

// connect dials port on the first of addrs that answers. Unless
// allowPrivate, the socket's Control hook refuses a non-public address
// before the connection is attempted.
func (d *dialer) connect(ctx context.Context, addrs []netip.Addr, port int, allowPrivate bool) (net.Conn, error) {
	nd := d.template
	next, nextCtx := nd.Control, nd.ControlContext
	nd.Control = nil
	nd.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("egress: dialling %q, which is not an address: %w", address, ErrNonPublicAddress)
		}
		if k := nonPublic(ap.Addr()); k != "" && !allowPrivate {
			return nonPublicError(ap.Addr(), k)
		}
		switch {
		case nextCtx != nil:
			return nextCtx(ctx, network, address, c)
		case next != nil:
			return next(network, address, c)
		}
		return nil
	}
	// Addresses are tried in turn, each with a share of the time left, the
	// way net.Dialer does, so one black-holed address does not use it all.
	var first error
	for i, a := range addrs {
		actx := ctx
		if dl, ok := ctx.Deadline(); ok {
			share := time.Until(dl) / time.Duration(len(addrs)-i)
			if share < 2*time.Second && time.Until(dl) > 2*time.Second {
				share = 2 * time.Second
			}
			var acancel context.CancelFunc
			actx, acancel = context.WithTimeout(ctx, share)
			defer acancel()
		}
		c, err := nd.DialContext(actx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)))
		if err == nil {
			return c, nil
		}
		if first == nil || errors.Is(err, ErrNonPublicAddress) {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}
