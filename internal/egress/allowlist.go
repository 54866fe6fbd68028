package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/httpapi"
)

// ErrInvalidAllowList is wrapped by every error ParseAllowList returns, and
// by LoadAllowList's when the file is read but does not parse.
var ErrInvalidAllowList = errors.New("invalid egress allow-list")

// maxAllowListBytes bounds the file LoadAllowList reads: a list of
// registries is a few hundred bytes, and a mistaken path (a log, a disk
// image) should fail at once rather than be read whole.
const maxAllowListBytes = 1 << 20

// AllowList is a deployment's list of the destinations the egress proxy may
// connect to. The agent is not trusted, so the list comes from the operator,
// never from a workspace. A nil or empty AllowList allows nothing. It is
// immutable and safe for concurrent use.
//
// The JSON form (see ParseAllowList):
//
//	{"allow": [
//	  "registry.npmjs.org",
//	  "*.pythonhosted.org",
//	  "proxy.golang.org:443",
//	  {"host": "127.0.0.1", "port": 8443, "private": true}
//	]}
type AllowList struct {
	rules []rule
}

// rule is one parsed entry of the list.
type rule struct {
	label    string     // `allow[2] "host:port"`, for errors
	host     string     // lower case, no trailing dot; for a wildcard the part after "*."
	wildcard bool       // host matches its proper subdomains, not itself
	ip       netip.Addr // valid when the entry is an IP literal (host is then its text)
	port     int        // 0: 443 for CONNECT, 80 for plain HTTP
	private  bool       // the destination may resolve to a non-public address
}

type allowListJSON struct {
	Allow *[]json.RawMessage `json:"allow"`
}

type entryJSON struct {
	Host    string `json:"host"`
	Port    *int   `json:"port"`
	Private bool   `json:"private"`
}

// ParseAllowList parses the allow-list's JSON form: an object with one
// field, "allow", an array of entries. An entry is a string, "host" or
// "host:port", or an object {"host": …, "port": …, "private": …} where only
// "host" is required.
//
// A host is a DNS name ("registry.npmjs.org"; case and a trailing dot do not
// matter), a wildcard "*.name" that matches every name ending in ".name" but
// not name itself ("*.pythonhosted.org" matches "files.pythonhosted.org";
// name must have at least two labels, so "*.org" is refused), or an IP
// literal ("127.0.0.1", "::1", in a string entry with a port "[::1]:8443"),
// which matches a request for that literal only: a name on the list never
// matches a request for an address, nor the other way round. Internationalised
// names are written in their ASCII ("xn--") form.
//
// Without a port an entry allows CONNECT to port 443 and plain HTTP to port
// 80; with one, both to that port only. The proxy refuses to connect to a
// loopback, private, link-local or otherwise non-public address, whatever
// name led to it, unless the entry that allowed the destination sets
// "private": true.
//
// Unknown fields and trailing data are errors. Every error wraps
// ErrInvalidAllowList and names the entry that is wrong.
func ParseAllowList(data []byte) (*AllowList, error) {
	var f allowListJSON
	if err := httpapi.DecodeStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidAllowList, err)
	}
	if f.Allow == nil {
		return nil, fmt.Errorf(`%w: the "allow" array is required (it may be empty, which allows nothing)`, ErrInvalidAllowList)
	}
	a := &AllowList{}
	for i, raw := range *f.Allow {
		r, err := parseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: allow[%d] %s: %v", ErrInvalidAllowList, i, shortJSON(raw), err)
		}
		r.label = fmt.Sprintf("allow[%d] %s", i, shortJSON(raw))
		a.rules = append(a.rules, r)
	}
	return a, nil
}

// LoadAllowList reads and parses the allow-list file at path. An error
// reading the file wraps the os error; an error in its content wraps
// ErrInvalidAllowList. Both name the path.
func LoadAllowList(path string) (*AllowList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("egress allow-list: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxAllowListBytes+1))
	if err != nil {
		return nil, fmt.Errorf("egress allow-list %s: %w", path, err)
	}
	if len(data) > maxAllowListBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidAllowList, path, maxAllowListBytes)
	}
	a, err := ParseAllowList(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Len is the number of entries on the list.
func (a *AllowList) Len() int {
	if a == nil {
		return 0
	}
	return len(a.rules)
}

func parseEntry(raw json.RawMessage) (rule, error) {
	switch t := bytes.TrimLeft(raw, " \t\r\n"); {
	case len(t) > 0 && t[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return rule{}, err
		}
		host, port, err := splitEntry(s)
		if err != nil {
			return rule{}, err
		}
		return newRule(host, port, false)
	case len(t) > 0 && t[0] == '{':
		var e entryJSON
		if err := httpapi.DecodeStrict(raw, &e); err != nil {
			return rule{}, err
		}
		if e.Host == "" {
			return rule{}, errors.New(`"host" is required`)
		}
		host := e.Host
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
			if err := checkBracketed(host); err != nil {
				return rule{}, err
			}
		} else if strings.Count(host, ":") == 1 {
			return rule{}, errors.New(`"host" has a port: give it in "port"`)
		}
		port := 0
		if e.Port != nil {
			if *e.Port < 1 || *e.Port > 65535 {
				return rule{}, fmt.Errorf(`"port" %d is not a port from 1 to 65535`, *e.Port)
			}
			port = *e.Port
		}
		return newRule(host, port, e.Private)
	}
	return rule{}, errors.New(`an entry is a string ("host" or "host:port") or an object with "host"`)
}

// splitEntry splits a string entry into host and port (0 when absent):
// "name", "name:443", "1.2.3.4:80", "::1" and "[::1]:443".
func splitEntry(s string) (string, int, error) {
	switch {
	case s == "":
		return "", 0, errors.New("the entry is empty")
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		return s[1 : len(s)-1], 0, checkBracketed(s[1 : len(s)-1])
	case strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "["):
		return s, 0, nil // a bare IPv6 literal; newRule checks it
	case !strings.Contains(s, ":"):
		return s, 0, nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, errors.New(`not "host", "host:port" or "[IPv6]:port"`)
	}
	port, err := parsePort(p)
	if err != nil {
		return "", 0, err
	}
	if strings.HasPrefix(s, "[") {
		if err := checkBracketed(host); err != nil {
			return "", 0, err
		}
	}
	return host, port, nil
}

// checkBracketed checks the text between brackets, which only an IPv6
// address may be in (a name in brackets would be matched as neither).
func checkBracketed(h string) error {
	if a, err := netip.ParseAddr(h); err != nil || !a.Is6() {
		return fmt.Errorf("%q: brackets hold an IPv6 address only", shorten(h))
	}
	return nil
}

// newRule checks and normalises host (without brackets or port).
func newRule(host string, port int, private bool) (rule, error) {
	r := rule{port: port, private: private}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		name, err := normalizeName(rest)
		if err != nil {
			return r, fmt.Errorf("wildcard %q: %v", host, err)
		}
		if !strings.Contains(name, ".") {
			return r, fmt.Errorf("wildcard %q would allow a whole top-level domain: name at least two labels after \"*.\"", host)
		}
		r.host, r.wildcard = name, true
		return r, nil
	}
	if strings.Contains(host, "*") {
		return r, fmt.Errorf("host %q: \"*\" is allowed only as a leading \"*.\"", host)
	}
	h, ip, err := normalizeHost(host)
	if err != nil {
		return r, err
	}
	r.host, r.ip = h, ip
	return r, nil
}

// match returns the rule allowing t, nil when none does. Among several, a
// rule that allows private addresses wins: an operator who marked a
// destination private meant it, whatever other entry also names it.
func (a *AllowList) match(t target, connect bool) *rule {
	if a == nil {
		return nil
	}
	var found *rule
	for i := range a.rules {
		r := &a.rules[i]
		if !r.matchesHost(t) {
			continue
		}
		want := r.port
		if want == 0 {
			want = 80
			if connect {
				want = 443
			}
		}
		if t.port != want {
			continue
		}
		if r.private {
			return r
		}
		if found == nil {
			found = r
		}
	}
	return found
}

func (r *rule) matchesHost(t target) bool {
	switch {
	case r.ip.IsValid():
		return t.ip == r.ip
	case t.ip.IsValid():
		return false
	case r.wildcard:
		return strings.HasSuffix(t.host, "."+r.host)
	}
	return t.host == r.host
}

// target is a destination as a request names it, normalised.
type target struct {
	host string     // lower-case name without trailing dot, or the IP's text
	ip   netip.Addr // valid when the request names an IP literal
	port int
}

// hostPort is the target for logs and messages, "[::1]:443" for IPv6.
func (t target) hostPort() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// parseTarget parses a request's authority ("host:port", "[v6]:port"), with
// defaultPort when it has none; 0 means the port is required.
func parseTarget(authority string, defaultPort int) (target, error) {
	host, port := authority, defaultPort
	splitPort := func() error {
		h, p, err := net.SplitHostPort(authority)
		if err != nil {
			return fmt.Errorf("%q is not host:port", shorten(authority))
		}
		n, err := parsePort(p)
		if err != nil {
			return err
		}
		host, port = h, n
		return nil
	}
	switch {
	case strings.HasPrefix(authority, "[") && strings.HasSuffix(authority, "]"):
		host = authority[1 : len(authority)-1]
	case strings.HasPrefix(authority, "["), strings.Count(authority, ":") == 1:
		if err := splitPort(); err != nil {
			return target{}, err
		}
	case strings.Contains(authority, ":"):
		return target{}, fmt.Errorf("%q: an IPv6 address must be in brackets", shorten(authority))
	}
	if port == 0 {
		return target{}, fmt.Errorf("%q has no port", shorten(authority))
	}
	if strings.HasPrefix(authority, "[") {
		if err := checkBracketed(host); err != nil {
			return target{}, err
		}
	}
	h, ip, err := normalizeHost(host)
	if err != nil {
		return target{}, err
	}
	return target{host: h, ip: ip, port: port}, nil
}

func parsePort(p string) (int, error) {
	if p == "" || len(p) > 5 || strings.Trim(p, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", shorten(p))
	}
	n, _ := strconv.Atoi(p)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return n, nil
}

// normalizeHost returns an IP literal's canonical text and the address
// (IPv4-mapped IPv6 as IPv4), or a DNS name in lower case without a
// trailing dot.
func normalizeHost(h string) (string, netip.Addr, error) {
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("%q: an address with a zone is not a destination", shorten(h))
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	name, err := normalizeName(h)
	return name, netip.Addr{}, err
}

// normalizeName checks a DNS name: ASCII letters, digits, '-' and '_' in
// dot-separated labels of 1 to 63 characters, at most 253 in all. A name
// whose last label starts with a digit is refused: no top-level domain does,
// and resolvers that accept the old inet_aton forms ("127.1", "2130706433",
// "0x7f.1") would turn it into an address no allow-list entry named.
func normalizeName(h string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("%q is not a host name", shorten(h))
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("%q is not a host name", shorten(h))
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("%q is not a host name (write an internationalised name in its xn-- form)", shorten(h))
			}
		}
	}
	if last := labels[len(labels)-1]; last[0] >= '0' && last[0] <= '9' {
		return "", fmt.Errorf("%q is neither an IP address nor a host name", shorten(h))
	}
	return name, nil
}

// shortJSON is an entry as written, compacted and shortened, for errors.
func shortJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return shorten(string(raw))
	}
	return shorten(b.String())
}

// shorten bounds text from a file or a request quoted in an error or a log.
func shorten(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
