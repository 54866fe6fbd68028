package servers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/talkide/platform/internal/httpapi"
)

// ErrInvalidAllowList is wrapped by every error ParseAllowList returns.
var ErrInvalidAllowList = errors.New("invalid MCP allow-list")

// ErrNotAllowed is wrapped by the error of a declared server that the
// allow-list does not permit.
var ErrNotAllowed = errors.New("not on the operator's MCP allow-list")

// AllowList is the deployment's list of the MCP servers a workspace may
// declare. The workspace is not trusted, so this list is configured by the
// operator, never read from a workspace. A nil or empty AllowList allows
// nothing. It is immutable and safe for concurrent use.
//
// The JSON form (see ParseAllowList):
//
//	{
//	  "stdio": [
//	    {"name": "echo", "command": "/usr/local/bin/echo-mcp"},
//	    {"command": "/usr/bin/uvx", "args": ["mcp-server-time"]},
//	    {"command_glob": "npx -y @modelcontextprotocol/server-*", "env": ["GITHUB_*"]}
//	  ],
//	  "http": [
//	    {"url_prefix": "https://mcp.internal.example/"}
//	  ]
//	}
type AllowList struct {
	stdio []stdioRule
	http  []httpRule
}

type stdioRule struct {
	label   string         // "stdio[i]"
	name    string         // when not empty, the server's name must be this
	command string         // exact command, or
	args    []string       // with command: exact arguments when argsSet
	argsSet bool           //
	glob    *regexp.Regexp // over "command arg1 arg2 …"
	env     []*regexp.Regexp
}

type httpRule struct {
	label  string
	name   string
	scheme string // lower case
	host   string // lower case, with the port if any
	path   string // ends in "/" unless it must match exactly
}

type allowListJSON struct {
	Stdio []json.RawMessage `json:"stdio"`
	HTTP  []json.RawMessage `json:"http"`
}

type stdioRuleJSON struct {
	Name        string    `json:"name"`
	Command     string    `json:"command"`
	Args        *[]string `json:"args"`
	CommandGlob string    `json:"command_glob"`
	Env         []string  `json:"env"`
}

type httpRuleJSON struct {
	Name      string `json:"name"`
	URLPrefix string `json:"url_prefix"`
}

// ParseAllowList parses the allow-list's JSON form (see AllowList).
//
// A "stdio" rule allows a server whose "command" is exactly "command" —
// with exactly "args" when the rule has "args", with any arguments when it
// has none — or whose command line (command and arguments joined by single
// spaces) matches "command_glob", where "*" matches any text (spaces and "/"
// included), "?" one character and "\" escapes the next one. With "name",
// the server must also be declared under that name. The declaration's
// "env" may only set variables the rule's "env" lists (names, or patterns
// with "*"); a rule without "env" allows none.
//
// An "http" rule allows a server whose "url" starts with "url_prefix": the
// same scheme and host (and port), and a path under the prefix's path, on a
// "/" boundary ("https://h/mcp" allows "https://h/mcp" and "https://h/mcp/x",
// not "https://h/mcpx"); the query is free.
//
// Unknown fields are errors. Every error wraps ErrInvalidAllowList and says
// which rule is wrong.
func ParseAllowList(data []byte) (*AllowList, error) {
	var f allowListJSON
	if err := httpapi.DecodeStrict(data, &f); err != nil {
		return nil, allowListError("", err.Error())
	}
	stdio, err := parseRules("stdio", f.Stdio, parseStdioRule)
	if err != nil {
		return nil, err
	}
	httpRules, err := parseRules("http", f.HTTP, parseHTTPRule)
	if err != nil {
		return nil, err
	}
	return &AllowList{stdio: stdio, http: httpRules}, nil
}

// parseRules decodes the rules of one kind, strictly, into their JSON form
// J and parses each with parse; an error names the rule by kind and index.
func parseRules[J, R any](kind string, raws []json.RawMessage, parse func(label string, rj J) (R, error)) ([]R, error) {
	var rules []R
	for i, raw := range raws {
		label := fmt.Sprintf("%s[%d]", kind, i)
		var rj J
		if err := httpapi.DecodeStrict(raw, &rj); err != nil {
			return nil, allowListError(label, err.Error())
		}
		r, err := parse(label, rj)
		if err != nil {
			return nil, allowListError(label, err.Error())
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseStdioRule(label string, rj stdioRuleJSON) (stdioRule, error) {
	r := stdioRule{label: label, name: rj.Name, command: rj.Command}
	if rj.Name != "" && !validName(rj.Name) {
		return r, fmt.Errorf("\"name\" %q is not a valid server name", rj.Name)
	}
	switch {
	case rj.Command != "" && rj.CommandGlob != "":
		return r, errors.New(`give "command" or "command_glob", not both`)
	case rj.Command == "" && rj.CommandGlob == "":
		return r, errors.New(`"command" or "command_glob" is required`)
	case rj.CommandGlob != "":
		if rj.Args != nil {
			return r, errors.New(`"args" goes with "command"; a "command_glob" covers the arguments`)
		}
		g, err := compileGlob(rj.CommandGlob)
		if err != nil {
			return r, fmt.Errorf("\"command_glob\": %v", err)
		}
		r.glob = g
	}
	if rj.Args != nil {
		r.args, r.argsSet = *rj.Args, true
	}
	for _, e := range rj.Env {
		if e == "" {
			return r, errors.New(`"env" has an empty entry`)
		}
		g, err := compileGlob(e)
		if err != nil {
			return r, fmt.Errorf("\"env\" %q: %v", e, err)
		}
		r.env = append(r.env, g)
	}
	return r, nil
}

func parseHTTPRule(label string, rj httpRuleJSON) (httpRule, error) {
	r := httpRule{label: label, name: rj.Name}
	if rj.Name != "" && !validName(rj.Name) {
		return r, fmt.Errorf("\"name\" %q is not a valid server name", rj.Name)
	}
	if rj.URLPrefix == "" {
		return r, errors.New(`"url_prefix" is required`)
	}
	u, err := url.Parse(rj.URLPrefix)
	switch {
	case err != nil:
		return r, fmt.Errorf("\"url_prefix\" %q does not parse", rj.URLPrefix)
	case u.Scheme != "http" && u.Scheme != "https":
		return r, fmt.Errorf("\"url_prefix\" %q: want an http:// or https:// URL", rj.URLPrefix)
	case u.Host == "":
		return r, fmt.Errorf("\"url_prefix\" %q has no host", rj.URLPrefix)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return r, fmt.Errorf("\"url_prefix\" %q: only scheme, host, port and path are allowed", rj.URLPrefix)
	}
	r.scheme, r.host, r.path = strings.ToLower(u.Scheme), strings.ToLower(u.Host), u.EscapedPath()
	if r.path == "" {
		r.path = "/"
	}
	return r, nil
}

// Check returns nil when the list allows sc, or an error wrapping
// ErrNotAllowed that says why not (without header or variable values).
func (a *AllowList) Check(sc ServerConfig) error {
	if a == nil || len(a.stdio)+len(a.http) == 0 {
		return fmt.Errorf("%w (the list allows no servers)", ErrNotAllowed)
	}
	switch sc.Type {
	case TypeStdio:
		return a.checkStdio(sc)
	case TypeHTTP:
		return a.checkHTTP(sc)
	}
	return fmt.Errorf("%w: unknown type %q", ErrNotAllowed, sc.Type)
}

func (a *AllowList) checkStdio(sc ServerConfig) error {
	line := strings.Join(append([]string{sc.Command}, sc.Args...), " ")
	var envProblem error
	for _, r := range a.stdio {
		if r.name != "" && r.name != sc.Name {
			continue
		}
		switch {
		case r.glob != nil:
			if !r.glob.MatchString(line) {
				continue
			}
		case r.command != sc.Command:
			continue
		case r.argsSet && !slices.Equal(r.args, sc.Args):
			continue
		}
		bad := ""
		for k := range sc.Env {
			if !matchesAny(k, r.env) && (bad == "" || k < bad) {
				bad = k
			}
		}
		if bad == "" {
			return nil
		}
		if envProblem == nil {
			envProblem = fmt.Errorf("%w: rule %s allows the command but not the environment variable %s", ErrNotAllowed, r.label, bad)
		}
	}
	if envProblem != nil {
		return envProblem
	}
	return fmt.Errorf("%w: no stdio rule allows the command %q", ErrNotAllowed, shorten(line))
}

func (a *AllowList) checkHTTP(sc ServerConfig) error {
	u, err := url.Parse(sc.URL)
	if err != nil {
		return fmt.Errorf("%w: the url does not parse", ErrNotAllowed)
	}
	for _, r := range a.http {
		if r.name != "" && r.name != sc.Name {
			continue
		}
		if r.allowsURL(u) {
			return nil
		}
	}
	return fmt.Errorf("%w: no http rule allows the url %q", ErrNotAllowed, shorten(redactURL(u)))
}

// allowsURL reports whether u is under the rule's prefix.
func (r *httpRule) allowsURL(u *url.URL) bool {
	if strings.ToLower(u.Scheme) != r.scheme || strings.ToLower(u.Host) != r.host || u.User != nil {
		return false
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if d := "/" + u.Path + "/"; strings.Contains(d, "/../") || strings.Contains(d, "/./") {
		return false // no dot segments: the server could resolve them out of the prefix
	}
	if strings.HasSuffix(r.path, "/") {
		return strings.HasPrefix(p, r.path)
	}
	return p == r.path || strings.HasPrefix(p, r.path+"/")
}

// redactURL shows a URL without its query, which may hold a credential.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = "…"
	}
	c.Fragment = ""
	return c.String()
}

// compileGlob compiles a pattern where "*" matches any text, "?" one
// character and "\" escapes the next character, anchored at both ends.
func compileGlob(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	escaped := false
	for _, c := range p {
		switch {
		case escaped:
			b.WriteString(regexp.QuoteMeta(string(c)))
			escaped = false
		case c == '\\':
			escaped = true
		case c == '*':
			b.WriteString(`.*`)
		case c == '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	if escaped {
		return nil, errors.New(`trailing "\"`)
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}

func matchesAny(s string, ps []*regexp.Regexp) bool {
	for _, p := range ps {
		if p.MatchString(s) {
			return true
		}
	}
	return false
}

func allowListError(where, msg string) error {
	if where == "" {
		return fmt.Errorf("%w: %s", ErrInvalidAllowList, msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalidAllowList, where, msg)
}
