package egress

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAllowListMatch(t *testing.T) {
	list, err := ParseAllowList([]byte(`{"allow": [
		"registry.npmjs.org",
		"*.pythonhosted.org",
		"*.golang.org:443",
		"Proxy.Golang.ORG.",
		"mirror.example:8080",
		"[2001:db8::10]:8443",
		"203.0.113.9",
		{"host": "127.0.0.1", "port": 8443, "private": true},
		{"host": "::1", "port": 9443, "private": true},
		{"host": "both.example"},
		{"host": "both.example", "private": true},
		{"host": "*.corp.example", "port": 7000}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		authority   string
		connect     bool
		want        bool
		wantPrivate bool
	}{
		"exact, CONNECT 443":                {authority: "registry.npmjs.org:443", connect: true, want: true},
		"exact, CONNECT other port":         {authority: "registry.npmjs.org:8443", connect: true},
		"exact, http 80":                    {authority: "registry.npmjs.org:80", want: true},
		"exact, http 443":                   {authority: "registry.npmjs.org:443"},
		"exact, CONNECT 80":                 {authority: "registry.npmjs.org:80", connect: true},
		"exact, case and trailing dot":      {authority: "REGISTRY.npmjs.org.:443", connect: true, want: true},
		"exact does not match a subdomain":  {authority: "evil.registry.npmjs.org:443", connect: true},
		"exact does not match a suffix":     {authority: "registry.npmjs.org.evil:443", connect: true},
		"exact does not match a prefix":     {authority: "xregistry.npmjs.org:443", connect: true},
		"wildcard, one label":               {authority: "files.pythonhosted.org:443", connect: true, want: true},
		"wildcard, two labels":              {authority: "a.b.pythonhosted.org:443", connect: true, want: true},
		"wildcard, not the apex":            {authority: "pythonhosted.org:443", connect: true},
		"wildcard, not a lookalike":         {authority: "evilpythonhosted.org:443", connect: true},
		"wildcard with port, CONNECT":       {authority: "sum.golang.org:443", connect: true, want: true},
		"wildcard with port, http on 443":   {authority: "sum.golang.org:443", want: true},
		"wildcard with port, http on 80":    {authority: "sum.golang.org:80"},
		"entry written in capitals":         {authority: "proxy.golang.org:443", connect: true, want: true},
		"explicit port, CONNECT":            {authority: "mirror.example:8080", connect: true, want: true},
		"explicit port, http":               {authority: "mirror.example:8080", want: true},
		"explicit port, not the default":    {authority: "mirror.example:443", connect: true},
		"IPv6 literal":                      {authority: "[2001:db8::10]:8443", connect: true, want: true},
		"IPv6 literal, other spelling":      {authority: "[2001:0db8:0:0::10]:8443", connect: true, want: true},
		"IPv4 literal":                      {authority: "203.0.113.9:443", connect: true, want: true},
		"IPv4-mapped literal":               {authority: "[::ffff:203.0.113.9]:443", connect: true, want: true},
		"IPv4 literal, other address":       {authority: "203.0.113.10:443", connect: true},
		"private loopback":                  {authority: "127.0.0.1:8443", connect: true, want: true, wantPrivate: true},
		"private loopback, other port":      {authority: "127.0.0.1:8444", connect: true},
		"private loopback v6":               {authority: "[::1]:9443", connect: true, want: true, wantPrivate: true},
		"a name is not its address":         {authority: "localhost:8443", connect: true},
		"the private entry wins":            {authority: "both.example:443", connect: true, want: true, wantPrivate: true},
		"private wildcard with port":        {authority: "a.corp.example:7000", connect: true, want: true},
		"unlisted":                          {authority: "example.org:443", connect: true},
		"decimal address is no name":        {authority: "2130706433:443", connect: true},
		"an address does not match a name":  {authority: "[::1]:443", connect: true},
		"registry over http on its default": {authority: "registry.npmjs.org", want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			def := 0
			if !tc.connect {
				def = 80
			}
			tg, err := parseTarget(tc.authority, def)
			if err != nil {
				if tc.want {
					t.Fatalf("parseTarget(%q): %v", tc.authority, err)
				}
				return
			}
			r := list.match(tg, tc.connect)
			if (r != nil) != tc.want {
				t.Fatalf("match(%q, connect=%v) = %v, want allowed=%v", tc.authority, tc.connect, r, tc.want)
			}
			if r != nil && r.private != tc.wantPrivate {
				t.Errorf("private = %v, want %v (rule %s)", r.private, tc.wantPrivate, r.label)
			}
		})
	}
}

func TestAllowListNilAndEmpty(t *testing.T) {
	tg := target{host: "registry.npmjs.org", port: 443}
	var nilList *AllowList
	if nilList.match(tg, true) != nil || nilList.Len() != 0 {
		t.Error("a nil list allows something")
	}
	empty, err := ParseAllowList([]byte(`{"allow": []}`))
	if err != nil {
		t.Fatal(err)
	}
	if empty.match(tg, true) != nil || empty.Len() != 0 {
		t.Error("an empty list allows something")
	}
}

func TestParseAllowListErrors(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string // in the error
	}{
		"not JSON":                 {in: `allow: [x]`, want: "invalid character"},
		"no allow":                 {in: `{}`, want: `"allow" array is required`},
		"null allow":               {in: `{"allow": null}`, want: `"allow" array is required`},
		"unknown top field":        {in: `{"allow": [], "deny": []}`, want: `unknown field "deny"`},
		"trailing data":            {in: `{"allow": []} {}`, want: "trailing data"},
		"entry not string":         {in: `{"allow": [443]}`, want: `allow[0] 443: an entry is a string`},
		"empty string":             {in: `{"allow": [""]}`, want: `allow[0] "": the entry is empty`},
		"unknown entry field":      {in: `{"allow": ["a.example", {"host": "b.example", "ports": [1]}]}`, want: `allow[1] {"host":"b.example","ports":[1]}: json: unknown field "ports"`},
		"no host":                  {in: `{"allow": [{"port": 443}]}`, want: `allow[0] {"port":443}: "host" is required`},
		"host with port in object": {in: `{"allow": [{"host": "a.example:443"}]}`, want: `give it in "port"`},
		"port zero":                {in: `{"allow": [{"host": "a.example", "port": 0}]}`, want: `"port" 0 is not a port`},
		"port too big":             {in: `{"allow": [{"host": "a.example", "port": 65536}]}`, want: `"port" 65536 is not a port`},
		"port not a number":        {in: `{"allow": [{"host": "a.example", "port": "443"}]}`, want: "cannot unmarshal string"},
		"port fraction":            {in: `{"allow": [{"host": "a.example", "port": 443.5}]}`, want: "cannot unmarshal number"},
		"private not bool":         {in: `{"allow": [{"host": "a.example", "private": "yes"}]}`, want: "cannot unmarshal string"},
		"string port zero":         {in: `{"allow": ["a.example:0"]}`, want: `allow[0] "a.example:0": port "0" is not a number from 1 to 65535`},
		"string port word":         {in: `{"allow": ["a.example:https"]}`, want: `port "https" is not a number`},
		"string port signed":       {in: `{"allow": ["a.example:+443"]}`, want: `port "+443" is not a number`},
		"string empty port":        {in: `{"allow": ["a.example:"]}`, want: `port "" is not a number`},
		"bare star":                {in: `{"allow": ["*"]}`, want: `"*" is allowed only as a leading "*."`},
		"star in the middle":       {in: `{"allow": ["a.*.example"]}`, want: `"*" is allowed only as a leading "*."`},
		"star without dot":         {in: `{"allow": ["*example.org"]}`, want: `"*" is allowed only`},
		"two stars":                {in: `{"allow": ["*.*.example.org"]}`, want: `wildcard "*.*.example.org"`},
		"wildcard TLD":             {in: `{"allow": ["*.org"]}`, want: "whole top-level domain"},
		"wildcard address":         {in: `{"allow": ["*.127.0.0.1"]}`, want: "neither an IP address nor a host name"},
		"space in name":            {in: `{"allow": ["a b.example"]}`, want: "is not a host name"},
		"empty label":              {in: `{"allow": ["a..example"]}`, want: "is not a host name"},
		"leading hyphen":           {in: `{"allow": ["-a.example"]}`, want: "is not a host name"},
		"unicode name":             {in: `{"allow": ["bücher.example"]}`, want: "xn-- form"},
		"long label":               {in: `{"allow": ["` + strings.Repeat("a", 64) + `.example"]}`, want: "is not a host name"},
		"numeric last label":       {in: `{"allow": ["127.1"]}`, want: "neither an IP address nor a host name"},
		"hex address":              {in: `{"allow": ["0x7f.1"]}`, want: "neither an IP address nor a host name"},
		"leading zeros address":    {in: `{"allow": ["127.000.000.001"]}`, want: "neither an IP address nor a host name"},
		"zone":                     {in: `{"allow": ["fe80::1%eth0"]}`, want: "zone"},
		"url":                      {in: `{"allow": ["https://registry.npmjs.org/"]}`, want: `allow[0] "https://registry.npmjs.org/"`},
		"bracketed name":           {in: `{"allow": ["[a.example]:443"]}`, want: "brackets hold an IPv6 address only"},
		"bracketed IPv4":           {in: `{"allow": [{"host": "[127.0.0.1]"}]}`, want: "brackets hold an IPv6 address only"},
		"second entry is named":    {in: `{"allow": ["a.example", "b.example:x"]}`, want: `allow[1] "b.example:x"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAllowList([]byte(tc.in))
			if !errors.Is(err, ErrInvalidAllowList) {
				t.Fatalf("err = %v, want ErrInvalidAllowList", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadAllowList(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "egress.json")
	if err := os.WriteFile(good, []byte(`{"allow": ["registry.npmjs.org", "*.golang.org:443", "proxy.golang.org"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := LoadAllowList(good)
	if err != nil || a.Len() != 3 {
		t.Fatalf("LoadAllowList = %v, %v; want 3 entries", a.Len(), err)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"allow": ["*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAllowList(bad); !errors.Is(err, ErrInvalidAllowList) || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: err = %v, want ErrInvalidAllowList naming %s", err, bad)
	}

	missing := filepath.Join(dir, "missing.json")
	if _, err := LoadAllowList(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: err = %v, want ErrNotExist naming %s", err, missing)
	}

	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, make([]byte, maxAllowListBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAllowList(huge); !errors.Is(err, ErrInvalidAllowList) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("huge file: err = %v, want ErrInvalidAllowList, larger than", err)
	}
}

func TestParseTarget(t *testing.T) {
	tests := map[string]struct {
		authority   string
		defaultPort int
		want        string // hostPort, or "" for an error
		isIP        bool
	}{
		"name and port":          {authority: "registry.npmjs.org:443", want: "registry.npmjs.org:443"},
		"name, default port":     {authority: "deb.debian.org", defaultPort: 80, want: "deb.debian.org:80"},
		"name, port required":    {authority: "deb.debian.org"},
		"upper case, dot":        {authority: "Deb.Debian.Org.:80", want: "deb.debian.org:80"},
		"IPv4":                   {authority: "127.0.0.1:8443", want: "127.0.0.1:8443", isIP: true},
		"IPv6":                   {authority: "[::1]:8443", want: "[::1]:8443", isIP: true},
		"IPv6, default port":     {authority: "[::1]", defaultPort: 80, want: "[::1]:80", isIP: true},
		"IPv4-mapped":            {authority: "[::ffff:127.0.0.1]:443", want: "127.0.0.1:443", isIP: true},
		"IPv6 without brackets":  {authority: "::1:443"},
		"zone":                   {authority: "[fe80::1%25eth0]:443"},
		"zone raw":               {authority: "[fe80::1%eth0]:443"},
		"port zero":              {authority: "a.example:0"},
		"port too large":         {authority: "a.example:65536"},
		"port word":              {authority: "a.example:https"},
		"empty port":             {authority: "a.example:", defaultPort: 80},
		"empty":                  {authority: "", defaultPort: 80},
		"userinfo":               {authority: "user@a.example:443"},
		"decimal address":        {authority: "2130706433:443"},
		"short address":          {authority: "127.1:443"},
		"octal address":          {authority: "0177.0.0.1:443"},
		"percent":                {authority: "a%2eexample:443"},
		"slash":                  {authority: "a.example/x:443"},
		"unbalanced bracket":     {authority: "[::1:443"},
		"brackets around a name": {authority: "[a.example]:443"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseTarget(tc.authority, tc.defaultPort)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("parseTarget(%q) = %v, want an error", tc.authority, got.hostPort())
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTarget(%q): %v", tc.authority, err)
			}
			if got.hostPort() != tc.want || got.ip.IsValid() != tc.isIP {
				t.Errorf("parseTarget(%q) = %s (ip %v), want %s (ip %v)", tc.authority, got.hostPort(), got.ip, tc.want, tc.isIP)
			}
		})
	}
}

// FuzzParseAllowList checks that no input panics, that every error wraps
// ErrInvalidAllowList, and that every parsed entry allows the destination
// it names and is well formed.
func FuzzParseAllowList(f *testing.F) {
	for _, seed := range []string{
		`{"allow": ["registry.npmjs.org", "*.golang.org:443", "proxy.golang.org"]}`,
		`{"allow": [{"host": "127.0.0.1", "port": 8443, "private": true}]}`,
		`{"allow": ["[::1]:443", "::1", "*.pythonhosted.org", {"host": "[::1]"}]}`,
		`{"allow": []}`,
		`{"allow": ["*"]}`,
		`{"allow": [{"host": "a.example:1"}]}`,
		`{"allow": ["a.example:99999"]}`,
		`{"allow": ["0x7f.1", "127.1", "1.2.3.4.5"]}`,
		`{"allow": [1, null, true, [], {}]}`,
		`{"allow": ["a.example"]} x`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAllowList(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidAllowList) {
				t.Fatalf("error %v does not wrap ErrInvalidAllowList", err)
			}
			return
		}
		for i := range a.rules {
			r := &a.rules[i]
			if r.port < 0 || r.port > 65535 || r.host == "" || r.label == "" {
				t.Fatalf("malformed rule %+v", r)
			}
			if r.host != strings.ToLower(r.host) || strings.HasSuffix(r.host, ".") {
				t.Fatalf("rule host %q is not normalised", r.host)
			}
			host := r.host
			if r.wildcard {
				host = "sub." + r.host
			}
			port := r.port
			if port == 0 {
				port = 443
			}
			tg, err := parseTarget(target{host: host, port: port}.hostPort(), 0)
			if err != nil {
				t.Fatalf("rule %s: its own host %q does not parse as a target: %v", r.label, host, err)
			}
			if a.match(tg, true) == nil {
				t.Fatalf("rule %s does not allow its own destination %s", r.label, tg.hostPort())
			}
			if r.wildcard {
				apex, err := parseTarget(target{host: r.host, port: port}.hostPort(), 0)
				if err == nil {
					if m := a.match(apex, true); m == r {
						t.Fatalf("wildcard rule %s matches its apex", r.label)
					}
				}
			}
		}
	})
}

// FuzzParseTarget checks that a parsed target is normalised: it parses
// again to itself.
func FuzzParseTarget(f *testing.F) {
	for _, seed := range []string{"a.example:443", "[::1]:80", "127.0.0.1:1", "[::ffff:10.0.0.1]:443", "A.B.:65535", "x", "[", ":", "[::1", "a:b:c"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := parseTarget(s, 443)
		if err != nil {
			return
		}
		if tg.port < 1 || tg.port > 65535 {
			t.Fatalf("port %d", tg.port)
		}
		again, err := parseTarget(tg.hostPort(), 0)
		if err != nil || again != tg {
			t.Fatalf("parseTarget(%q) = %+v, whose hostPort %q parses to %+v, %v", s, tg, tg.hostPort(), again, err)
		}
	})
}
