package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// ErrInvalidPolicy is wrapped by every error ParsePolicy returns.
var ErrInvalidPolicy = errors.New("invalid tool policy")

// Policy is a deployment's allow/deny rules for tool calls, checked before
// every call (see Check). It is a guard rail against mistakes, not a
// sandbox: commands are matched as text, and the sandbox around the worker
// remains the boundary. A nil *Policy allows everything. A Policy is
// immutable and safe for concurrent use.
//
// The JSON form (see ParsePolicy):
//
//	{
//	  "default": "allow",
//	  "rules": [
//	    {"name": "no-network", "tool": "Bash", "action": "deny", "commands": ["curl *", "wget *"], "reason": "no network access"},
//	    {"tool": "{Write,Edit}", "action": "deny", "paths": ["**/.env", "secrets/**"]},
//	    {"tool": "Bash", "action": "allow", "commands": ["go test *", "ls", "ls *"]}
//	  ]
//	}
//
// Deny overrides: a call is denied if any deny rule matches it, whatever
// the order of the rules; otherwise it is allowed if an allow rule matches
// it; otherwise the default decides.
type Policy struct {
	allowByDefault bool
	rules          []policyRule
}

type policyRule struct {
	label    string // the name, or "rules[i]"
	allow    bool
	tool     *regexp.Regexp // over tool names, with the syntax of commands
	commands []commandPattern
	paths    []pathPattern
	reason   string
}

type commandPattern struct {
	text string
	re   *regexp.Regexp
}

type pathPattern struct {
	text string
	g    *globPattern
}

// Decision is the outcome of Policy.Check.
type Decision struct {
	Allowed bool
	// Rule names the deciding rule: its "name", else "rules[i]" (its index
	// in the file), else "default".
	Rule string
	// Reason says why, for the model and the user.
	Reason string
}

// Message is the tool result a denied call gets: it names the rule and
// says why.
func (d Decision) Message() string {
	return fmt.Sprintf("Denied by policy rule %q: %s. This deployment's tool policy does not allow this call; do not retry it or work around the policy — if you need it, tell the user.", d.Rule, d.Reason)
}

// policyFile is the JSON form of a Policy.
type policyFile struct {
	Default string            `json:"default"`
	Rules   []json.RawMessage `json:"rules"` // policyJSON each, decoded one by one to say which is wrong
}

type policyJSON struct {
	Name     string   `json:"name"`
	Tool     string   `json:"tool"`
	Action   string   `json:"action"`
	Commands []string `json:"commands"`
	Paths    []string `json:"paths"`
	Reason   string   `json:"reason"`
}

// Tools whose input the policy knows: the Bash command, and the path each
// file tool works on.
var (
	commandTools = map[string]bool{"Bash": true}
	pathTools    = map[string]bool{"Read": true, "Write": true, "Edit": true, "Glob": true, "Grep": true, "LS": true}
)

// ParsePolicy parses a policy's JSON form (see Policy):
//
//   - "default": "allow" (when omitted) or "deny": the decision when no rule
//     matches.
//   - "rules": each with "tool" (required: a name, or a pattern over names
//     with the syntax of commands, such as "*", "{Write,Edit}", "mcp__*"), "action" (required: "allow" or
//     "deny"), and optionally "name" (used in messages), "reason" (added to
//     the message the model sees) and one of:
//   - "commands": globs over Bash commands, where "*" matches any text
//     (spaces and "/" included), "?" one character, "{a,b}" alternatives,
//     and "\" escapes; runs of white space count as one space.
//   - "paths": globs over workspace-relative paths, as in Glob ("**" for
//     any number of directories; "*" does not cross "/").
//
// A rule without commands or paths matches every call of its tools. Unknown
// fields are errors. Every error wraps ErrInvalidPolicy and says where the
// problem is.
func ParsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	if err := decodeStrict(data, &f, `"default", "rules"`); err != nil {
		return nil, policyError(err.Error())
	}
	p := &Policy{}
	switch f.Default {
	case "", "allow":
		p.allowByDefault = true
	case "deny":
	default:
		return nil, policyError(fmt.Sprintf(`"default" must be "allow" or "deny", got %q`, f.Default))
	}
	for i, raw := range f.Rules {
		var rj policyJSON
		if err := decodeStrict(raw, &rj, `"name", "tool", "action", "commands", "paths", "reason"`); err != nil {
			return nil, policyError(fmt.Sprintf("rules[%d]: %v", i, err))
		}
		r, err := parseRule(rj)
		if err != nil {
			where := fmt.Sprintf("rules[%d]", i)
			if rj.Name != "" {
				where += fmt.Sprintf(" (%q)", rj.Name)
			}
			return nil, policyError(where + ": " + err.Error())
		}
		r.label = rj.Name
		if r.label == "" {
			r.label = fmt.Sprintf("rules[%d]", i)
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func policyError(msg string) error {
	return fmt.Errorf("%w: %s", ErrInvalidPolicy, msg)
}

// decodeStrict decodes one JSON object into v, refusing unknown fields
// (known lists them for the message) and trailing data, with messages free
// of Go type names.
func decodeStrict(data []byte, v any, known string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, err)
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%q must be %s, got %s", te.Field, jsonKind(te.Type), te.Value)
	case errors.As(err, &te):
		return fmt.Errorf("want an object, got %s", te.Value)
	case errors.Is(err, io.EOF):
		return errors.New("empty input; want a JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for this one; only the message
		// is improved, so a change in its wording costs only the hint.
		return fmt.Errorf("%s (known fields: %s)", strings.TrimPrefix(err.Error(), "json: "), known)
	default:
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

func parseRule(rj policyJSON) (policyRule, error) {
	var r policyRule
	if rj.Tool == "" {
		return r, errors.New(`"tool" is missing: give a tool name such as "Bash", or a pattern such as "*" or "{Write,Edit}"`)
	}
	tool, err := compileCommandPattern(rj.Tool)
	if err != nil {
		return r, fmt.Errorf(`"tool": %v`, err)
	}
	r.tool = tool
	switch rj.Action {
	case "allow":
		r.allow = true
	case "deny":
	case "":
		return r, errors.New(`"action" is missing: it must be "allow" or "deny"`)
	default:
		return r, fmt.Errorf(`"action" must be "allow" or "deny", got %q`, rj.Action)
	}
	if rj.Commands != nil && rj.Paths != nil {
		return r, errors.New(`a rule has "commands" or "paths", not both`)
	}
	literal := !hasMeta(rj.Tool)
	if rj.Commands != nil {
		if len(rj.Commands) == 0 {
			return r, errors.New(`"commands" is empty; omit it to match every call`)
		}
		if literal && !commandTools[rj.Tool] {
			return r, fmt.Errorf(`"commands" apply to Bash, not %s; use "paths" for file tools`, rj.Tool)
		}
		for j, c := range rj.Commands {
			re, err := compileCommandPattern(c)
			if err != nil {
				return r, fmt.Errorf("commands[%d]: %v", j, err)
			}
			r.commands = append(r.commands, commandPattern{c, re})
		}
	}
	if rj.Paths != nil {
		if len(rj.Paths) == 0 {
			return r, errors.New(`"paths" is empty; omit it to match every call`)
		}
		if literal && !pathTools[rj.Tool] {
			return r, fmt.Errorf(`"paths" apply to the file tools (Read, Write, Edit, Glob, Grep, LS), not %s`, rj.Tool)
		}
		for j, s := range rj.Paths {
			if strings.HasPrefix(s, "/") {
				return r, fmt.Errorf("paths[%d]: %q is absolute; path patterns are relative to the workspace root", j, s)
			}
			g, err := compileGlob(s)
			if err != nil {
				return r, fmt.Errorf("paths[%d]: %v", j, err)
			}
			r.paths = append(r.paths, pathPattern{s, g})
		}
	}
	r.reason = rj.Reason
	return r, nil
}

// compileCommandPattern compiles a command glob: "*" any text, "?" one
// character, "{a,b}" alternatives, "\" escapes the next character;
// everything else is literal, and runs of white space are one space.
func compileCommandPattern(p string) (*regexp.Regexp, error) {
	if strings.TrimSpace(p) == "" {
		return nil, errors.New("empty pattern")
	}
	alts, err := expandBraces(p)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i, a := range alts {
		if i > 0 {
			b.WriteByte('|')
		}
		a = strings.Join(strings.Fields(a), " ")
		for j := 0; j < len(a); {
			r, size := utf8.DecodeRuneInString(a[j:])
			j += size
			switch r {
			case '*':
				b.WriteString(`.*`)
			case '?':
				b.WriteString(`.`)
			case '\\':
				if j < len(a) {
					r, size = utf8.DecodeRuneInString(a[j:])
					j += size
				}
				b.WriteString(regexp.QuoteMeta(string(r)))
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}

// callTargets is what a call touches, as far as the policy can tell.
type callTargets struct {
	command string   // the whole Bash command, white space normalized
	simple  []string // its simple commands
	isBash  bool     // the call has a command to match
	paths   []callPath
}

// callPath is one path a call names, with the workspace-relative forms it
// is matched as: lexically cleaned ("a/../.env" is ".env") and, when it
// resolves, the real path through symlinks.
type callPath struct {
	given string
	forms []string
}

// targets reads the call's input the way the tool itself decodes it (the
// same structs, so also the same case-insensitive keys and last-duplicate-
// wins rule). Input the tool would reject yields no targets.
func targets(tool string, input json.RawMessage, ws *Workspace) callTargets {
	var t callTargets
	var given []string
	switch tool {
	case "Bash":
		var in BashInput
		if decodeInput(input, &in, "command") == nil {
			t.isBash = true
			t.command = normalizeCommand(in.Command)
			t.simple = splitCommand(in.Command)
		}
	case "Read":
		var in ReadInput
		if decodeInput(input, &in, "file_path") == nil {
			given = append(given, in.FilePath)
		}
	case "Write":
		var in WriteInput
		if decodeInput(input, &in, "file_path") == nil {
			given = append(given, in.FilePath)
		}
	case "Edit":
		var in EditInput
		if decodeInput(input, &in, "file_path") == nil {
			given = append(given, in.FilePath)
		}
	case "Glob":
		var in GlobInput
		if decodeInput(input, &in, "pattern") == nil {
			dir, _ := in.split()
			given = append(given, dir)
		}
	case "Grep":
		var in GrepInput
		if decodeInput(input, &in, "pattern") == nil {
			dir := in.Path
			if dir == "" {
				dir = "."
			}
			given = append(given, dir)
		}
	case "LS":
		var in LSInput
		if decodeInput(input, &in, "path") == nil {
			given = append(given, in.Path)
		}
	}
	for _, g := range given {
		t.paths = append(t.paths, callPath{given: g, forms: pathForms(g, ws)})
	}
	return t
}

// pathForms returns the workspace-relative, "/"-separated forms of p: its
// lexically cleaned form, and its real path when ws resolves it (if
// different). A path outside the workspace has neither; the tool refuses
// it anyway.
func pathForms(p string, ws *Workspace) []string {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return nil
	}
	var forms []string
	c := filepath.Clean(p)
	switch {
	case filepath.IsAbs(c):
		if ws != nil {
			for _, root := range []string{ws.root, ws.given} {
				if within(root, c) {
					rel, _ := filepath.Rel(root, c)
					forms = append(forms, filepath.ToSlash(rel))
					break
				}
			}
		}
	case c != ".." && !strings.HasPrefix(c, ".."+string(filepath.Separator)):
		forms = append(forms, filepath.ToSlash(c))
	}
	if ws != nil {
		if real, err := ws.Resolve(p); err == nil {
			rel := filepath.ToSlash(ws.Rel(real))
			if len(forms) == 0 || forms[0] != rel {
				forms = append(forms, rel)
			}
		}
	}
	return forms
}

// normalizeCommand collapses runs of white space into one space and trims
// the grouping characters "(", ")", "{" and "}" from both ends.
func normalizeCommand(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	for {
		t := strings.TrimSpace(strings.TrimLeft(strings.TrimRight(s, ")} "), "({ "))
		if t == s {
			return s
		}
		s = t
	}
}

// splitCommand splits a command line into simple commands at ";", "&&",
// "||", "|", "|&", a background "&" and newlines, without regard to quotes
// (so "echo 'a;b'" splits too: more pieces to match, never fewer).
func splitCommand(cmd string) []string {
	var parts []string
	start := 0
	cut := func(end, next int) int {
		if s := normalizeCommand(cmd[start:end]); s != "" {
			parts = append(parts, s)
		}
		start = next
		return next - 1
	}
	for i := 0; i < len(cmd); i++ {
		switch c := cmd[i]; {
		case c == '\n' || c == ';':
			i = cut(i, i+1)
		case c == '&' && i+1 < len(cmd) && cmd[i+1] == '&',
			c == '|' && i+1 < len(cmd) && (cmd[i+1] == '|' || cmd[i+1] == '&'):
			i = cut(i, i+2)
		case c == '|':
			i = cut(i, i+1)
		case c == '&':
			// Not the "&" of a redirection: 2>&1, >&2, &>file, <&3.
			if i > 0 && (cmd[i-1] == '>' || cmd[i-1] == '<') || i+1 < len(cmd) && cmd[i+1] == '>' {
				continue
			}
			i = cut(i, i+1)
		}
	}
	cut(len(cmd), len(cmd))
	return parts
}

// Check decides whether the call may run. toolName and input are the
// model's tool_use; ws (which may be nil) lets path rules see through
// symlinks and relative forms of absolute paths. A nil Policy allows
// everything.
func (p *Policy) Check(toolName string, input json.RawMessage, ws *Workspace) Decision {
	if p == nil {
		return Decision{Allowed: true, Reason: "no policy"}
	}
	t := targets(toolName, input, ws)
	for _, r := range p.rules {
		if r.allow || !r.tool.MatchString(toolName) {
			continue
		}
		if why, ok := r.denies(toolName, t); ok {
			if r.reason != "" {
				why += " (" + r.reason + ")"
			}
			return Decision{Allowed: false, Rule: r.label, Reason: why}
		}
	}
	for _, r := range p.rules {
		if !r.allow || !r.tool.MatchString(toolName) {
			continue
		}
		if why, ok := r.allows(toolName, t); ok {
			return Decision{Allowed: true, Rule: r.label, Reason: why}
		}
	}
	if p.allowByDefault {
		return Decision{Allowed: true, Rule: "default", Reason: "no rule matches this call and the default is allow"}
	}
	return Decision{Allowed: false, Rule: "default", Reason: fmt.Sprintf("no rule allows this %s call and the policy's default is deny", toolName)}
}

// denies reports whether a deny rule matches: the whole command or any
// simple command matches one of its command patterns, or any form of any
// path matches one of its path patterns.
func (r *policyRule) denies(tool string, t callTargets) (string, bool) {
	switch {
	case r.commands != nil:
		if !t.isBash {
			return "", false
		}
		for _, c := range r.commands {
			if c.re.MatchString(t.command) {
				return fmt.Sprintf("the command %q matches %q", shorten(t.command), c.text), true
			}
		}
		for _, s := range t.simple {
			for _, c := range r.commands {
				if c.re.MatchString(s) {
					return fmt.Sprintf("the command %q contains %q, which matches %q", shorten(t.command), shorten(s), c.text), true
				}
			}
		}
		return "", false
	case r.paths != nil:
		for _, cp := range t.paths {
			for _, f := range cp.forms {
				for _, pp := range r.paths {
					if pp.g.match(f) {
						return fmt.Sprintf("the path %q (%s) matches %q", cp.given, f, pp.text), true
					}
				}
			}
		}
		return "", false
	default:
		return fmt.Sprintf("%s calls are denied", tool), true
	}
}

// allows reports whether an allow rule matches: every simple command of
// the command matches one of its command patterns (so "go test *" does not
// allow "go test ./... && rm -rf /"), or every form of every path matches
// one of its path patterns.
func (r *policyRule) allows(tool string, t callTargets) (string, bool) {
	switch {
	case r.commands != nil:
		if !t.isBash || len(t.simple) == 0 {
			return "", false
		}
		for _, s := range t.simple {
			if !matchesAny(s, r.commands) {
				return "", false
			}
		}
		return "every command matches an allowed pattern", true
	case r.paths != nil:
		if len(t.paths) == 0 {
			return "", false
		}
		for _, cp := range t.paths {
			if len(cp.forms) == 0 {
				return "", false
			}
			for _, f := range cp.forms {
				if !matchesAnyPath(f, r.paths) {
					return "", false
				}
			}
		}
		return "every path matches an allowed pattern", true
	default:
		return fmt.Sprintf("%s calls are allowed", tool), true
	}
}

func matchesAny(s string, ps []commandPattern) bool {
	for _, p := range ps {
		if p.re.MatchString(s) {
			return true
		}
	}
	return false
}

func matchesAnyPath(rel string, ps []pathPattern) bool {
	for _, p := range ps {
		if p.g.match(rel) {
			return true
		}
	}
	return false
}

// shorten cuts s for a message.
func shorten(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return headUTF8(s[:max]) + "…"
}
