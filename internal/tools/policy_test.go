package tools

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustPolicy(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(src))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

func TestParsePolicyErrors(t *testing.T) {
	tests := map[string]struct {
		src  string
		want string
	}{
		"empty":            {``, "empty input; want a JSON object"},
		"not JSON":         {`{"rules": [}`, "invalid JSON at byte 12"},
		"not an object":    {`[]`, "want an object, got array"},
		"trailing data":    {`{} {}`, "unexpected data after the JSON object"},
		"bad default":      {`{"default":"maybe"}`, `"default" must be "allow" or "deny", got "maybe"`},
		"unknown field":    {`{"rule":[]}`, `unknown field "rule" (known fields: "default", "rules")`},
		"rules not a list": {`{"rules":{}}`, `"rules" must be an array, got object`},
		"unknown rule field": {`{"rules":[{"tool":"Bash","action":"deny"},{"tool":"Write","deny_paths":["x"]}]}`,
			`rules[1]: unknown field "deny_paths" (known fields: "name", "tool", "action", "commands", "paths", "reason")`},
		"rule not an object":  {`{"rules":["Bash"]}`, "rules[0]: want an object, got string"},
		"tool not a string":   {`{"rules":[{"tool":1}]}`, `rules[0]: "tool" must be a string, got number`},
		"missing tool":        {`{"rules":[{"action":"deny"}]}`, `rules[0]: "tool" is missing`},
		"missing action":      {`{"rules":[{"tool":"Bash"}]}`, `rules[0]: "action" is missing: it must be "allow" or "deny"`},
		"bad action":          {`{"rules":[{"name":"x","tool":"Bash","action":"block"}]}`, `rules[0] ("x"): "action" must be "allow" or "deny", got "block"`},
		"commands and paths":  {`{"rules":[{"tool":"*","action":"deny","commands":["a"],"paths":["b"]}]}`, `rules[0]: a rule has "commands" or "paths", not both`},
		"commands on Write":   {`{"rules":[{"tool":"Write","action":"deny","commands":["rm *"]}]}`, `rules[0]: "commands" apply to Bash, not Write`},
		"paths on Bash":       {`{"rules":[{"tool":"Bash","action":"deny","paths":["x/**"]}]}`, `rules[0]: "paths" apply to the file tools`},
		"empty commands":      {`{"rules":[{"tool":"Bash","action":"deny","commands":[]}]}`, `rules[0]: "commands" is empty`},
		"empty command":       {`{"rules":[{"tool":"Bash","action":"deny","commands":["ls"," "]}]}`, "rules[0]: commands[1]: empty pattern"},
		"bad path pattern":    {`{"rules":[{"tool":"Read","action":"deny","paths":["ok/**","[x"]}]}`, `rules[0]: paths[1]: invalid glob pattern "[x"`},
		"absolute path":       {`{"rules":[{"tool":"Read","action":"deny","paths":["/etc/**"]}]}`, `rules[0]: paths[0]: "/etc/**" is absolute`},
		"path not a string":   {`{"rules":[{"tool":"Read","action":"deny","paths":[1]}]}`, `rules[0]: "paths" must be a string, got number`},
		"too many braces":     {`{"rules":[{"tool":"Bash","action":"deny","commands":["{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"]}]}`, "more than 1024 alternatives"},
		"paths on a MCP tool": {`{"rules":[{"tool":"mcp__x__y","action":"deny","paths":["a"]}]}`, `not mcp__x__y`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.src))
			if err == nil {
				t.Fatalf("ParsePolicy = %+v, want an error", p)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error %v does not wrap ErrInvalidPolicy", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// policyCase is one call and the decision expected for it.
type policyCase struct {
	tool  string
	input any // marshalled; a string is raw JSON
	allow bool
	rule  string // the deciding rule
	why   string // substring of the reason
}

func checkPolicy(t *testing.T, p *Policy, ws *Workspace, tests map[string]policyCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := p.Check(tc.tool, input(t, tc.input), ws)
			if d.Allowed != tc.allow || d.Rule != tc.rule || !strings.Contains(d.Reason, tc.why) {
				t.Errorf("Check = %+v, want allowed %v by rule %q, reason containing %q", d, tc.allow, tc.rule, tc.why)
			}
		})
	}
}

func TestPolicyNilAllows(t *testing.T) {
	var p *Policy
	if d := p.Check("Bash", json.RawMessage(`{"command":"rm -rf /"}`), nil); !d.Allowed {
		t.Errorf("nil policy: %+v", d)
	}
	if d := mustPolicy(t, `{}`).Check("Bash", json.RawMessage(`{"command":"x"}`), nil); !d.Allowed || d.Rule != "default" {
		t.Errorf("empty policy: %+v", d)
	}
}

func TestPolicyByTool(t *testing.T) {
	p := mustPolicy(t, `{"rules":[
		{"name":"no-web","tool":"WebFetch","action":"deny"},
		{"tool":"mcp__*","action":"deny","reason":"MCP is off here"},
		{"tool":"{Write,Edit}","action":"deny"}
	]}`)
	checkPolicy(t, p, nil, map[string]policyCase{
		"named rule":     {"WebFetch", `{}`, false, "no-web", "WebFetch calls are denied"},
		"tool pattern":   {"mcp__tracker__report", `{}`, false, "rules[1]", "mcp__tracker__report calls are denied (MCP is off here)"},
		"braces":         {"Edit", `{"file_path":"a"}`, false, "rules[2]", "Edit calls are denied"},
		"not matched":    {"Read", `{"file_path":"a"}`, true, "default", "default is allow"},
		"case matters":   {"webfetch", `{}`, true, "default", ""},
		"pattern anchor": {"xmcp__a", `{}`, true, "default", ""},
	})
	d := p.Check("WebFetch", nil, nil)
	if msg := d.Message(); !strings.HasPrefix(msg, `Denied by policy rule "no-web": WebFetch calls are denied.`) {
		t.Errorf("Message = %q", msg)
	}
}

// TestPolicyDenyOverrides checks that a deny rule wins over an allow rule
// whatever their order.
func TestPolicyDenyOverrides(t *testing.T) {
	for name, src := range map[string]string{
		"allow first": `{"default":"deny","rules":[{"tool":"Bash","action":"allow"},{"tool":"Bash","action":"deny","commands":["rm *"]}]}`,
		"deny first":  `{"default":"deny","rules":[{"tool":"Bash","action":"deny","commands":["rm *"]},{"tool":"Bash","action":"allow"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := mustPolicy(t, src)
			denyRule, allowRule := "rules[1]", "rules[0]"
			if name == "deny first" {
				denyRule, allowRule = allowRule, denyRule
			}
			checkPolicy(t, p, nil, map[string]policyCase{
				"denied":  {"Bash", map[string]any{"command": "rm x"}, false, denyRule, `"rm x" matches "rm *"`},
				"allowed": {"Bash", map[string]any{"command": "ls"}, true, allowRule, "Bash calls are allowed"},
				"default": {"Read", map[string]any{"file_path": "a"}, false, "default", "no rule allows this Read call and the policy's default is deny"},
			})
		})
	}
}

func TestPolicyPaths(t *testing.T) {
	ws := newWorkspace(t)
	root := ws.Root()
	writeFiles(t, root, map[string]string{"secrets/k": "x", "src/a.go": "", "docs/x": ""})
	symlink(t, "secrets", filepath.Join(root, "cfg"))
	symlink(t, "../docs", filepath.Join(root, "src", "docs"))
	p := mustPolicy(t, `{"rules":[
		{"name":"env","tool":"{Write,Edit}","action":"deny","paths":["**/.env"]},
		{"name":"secrets","tool":"*","action":"deny","paths":["secrets/**"]}
	]}`)
	checkPolicy(t, p, ws, map[string]policyCase{
		"env at the root":        {"Write", map[string]any{"file_path": ".env", "content": ""}, false, "env", `the path ".env" (.env) matches "**/.env"`},
		"env deep":               {"Edit", map[string]any{"file_path": "a/b/.env", "old_string": "", "new_string": "x"}, false, "env", `"a/b/.env"`},
		"dotdot normalized":      {"Write", map[string]any{"file_path": "src/../.env", "content": ""}, false, "env", `the path "src/../.env" (.env) matches`},
		"dot and double slash":   {"Read", map[string]any{"file_path": "./secrets//k"}, false, "secrets", `(secrets/k) matches "secrets/**"`},
		"dotdot into secrets":    {"Read", map[string]any{"file_path": "src/../secrets/k"}, false, "secrets", "(secrets/k)"},
		"absolute":               {"Read", map[string]any{"file_path": filepath.Join(root, "secrets", "k")}, false, "secrets", "(secrets/k)"},
		"through a symlink":      {"Read", map[string]any{"file_path": "cfg/k"}, false, "secrets", `the path "cfg/k" (secrets/k) matches`},
		"the directory itself":   {"LS", map[string]any{"path": "secrets"}, false, "secrets", `"secrets"`},
		"grep in it":             {"Grep", map[string]any{"pattern": "x", "path": "cfg"}, false, "secrets", "(secrets)"},
		"glob's literal prefix":  {"Glob", map[string]any{"pattern": "secrets/*.key"}, false, "secrets", `"secrets"`},
		"glob absolute pattern":  {"Glob", map[string]any{"pattern": filepath.Join(root, "secrets") + "/**"}, false, "secrets", "(secrets)"},
		"keys as the tool reads": {"Read", `{"file_path":"src/a.go","FILE_PATH":"secrets/k"}`, false, "secrets", "(secrets/k)"},
		"env not for Read":       {"Read", map[string]any{"file_path": ".env"}, true, "default", ""},
		"elsewhere":              {"Write", map[string]any{"file_path": "src/a.go", "content": ""}, true, "default", ""},
		"similar name":           {"Read", map[string]any{"file_path": "secrets2/k"}, true, "default", ""},
		"grep from the root":     {"Grep", map[string]any{"pattern": "x"}, true, "default", ""},
		"invalid input":          {"Read", map[string]any{"file_path": 5}, true, "default", ""},
		"bash has no paths":      {"Bash", map[string]any{"command": "cat secrets/k"}, true, "default", ""},
	})

	allowList := mustPolicy(t, `{"default":"deny","rules":[
		{"tool":"{Read,Glob,Grep,LS}","action":"allow"},
		{"name":"src","tool":"{Write,Edit}","action":"allow","paths":["src/**"]}
	]}`)
	checkPolicy(t, allowList, ws, map[string]policyCase{
		"inside":            {"Write", map[string]any{"file_path": "src/b.go", "content": ""}, true, "src", "every path matches"},
		"dotdot out of src": {"Write", map[string]any{"file_path": "src/../b.go", "content": ""}, false, "default", "no rule allows this Write call"},
		"symlink out":       {"Write", map[string]any{"file_path": "src/docs/x", "content": ""}, false, "default", ""},
		"outside":           {"Write", map[string]any{"file_path": "/etc/passwd", "content": ""}, false, "default", ""},
		"other tools":       {"LS", map[string]any{"path": "."}, true, "rules[0]", "LS calls are allowed"},
		"bash":              {"Bash", map[string]any{"command": "ls"}, false, "default", ""},
	})
}

func TestPolicyCommands(t *testing.T) {
	p := mustPolicy(t, `{"rules":[
		{"name":"rm","tool":"Bash","action":"deny","commands":["rm -rf /*"]},
		{"name":"net","tool":"Bash","action":"deny","commands":["{curl,wget} *"],"reason":"no network"},
		{"name":"sudo","tool":"Bash","action":"deny","commands":["*sudo *"]}
	]}`)
	checkPolicy(t, p, nil, map[string]policyCase{
		"whole command":       {"Bash", map[string]any{"command": "rm -rf /"}, false, "rm", `the command "rm -rf /" matches "rm -rf /*"`},
		"after &&":            {"Bash", map[string]any{"command": "echo ok && rm -rf /"}, false, "rm", `the command "echo ok && rm -rf /" contains "rm -rf /", which matches "rm -rf /*"`},
		"after ;":             {"Bash", map[string]any{"command": "echo ok; curl http://x/y"}, false, "net", `contains "curl http://x/y", which matches "{curl,wget} *" (no network)`},
		"after ||":            {"Bash", map[string]any{"command": "false || wget x"}, false, "net", ""},
		"in a pipe":           {"Bash", map[string]any{"command": "cat f | curl -d @- x"}, false, "net", ""},
		"after a newline":     {"Bash", map[string]any{"command": "cd /tmp\nrm -rf /home"}, false, "rm", ""},
		"in the background":   {"Bash", map[string]any{"command": "sleep 1 & curl x"}, false, "net", ""},
		"white space":         {"Bash", map[string]any{"command": "rm \t -rf   /srv"}, false, "rm", ""},
		"in a subshell":       {"Bash", map[string]any{"command": "(rm -rf /)"}, false, "rm", ""},
		"in a group":          {"Bash", map[string]any{"command": "{ echo; rm -rf /; }"}, false, "rm", ""},
		"leading star":        {"Bash", map[string]any{"command": "FOO=1 sudo ls"}, false, "sudo", ""},
		"keys as bash reads":  {"Bash", `{"command":"ls","Command":"curl x"}`, false, "net", ""},
		"last duplicate wins": {"Bash", `{"command":"ls","command":"curl x"}`, false, "net", ""},
		"redirections":        {"Bash", map[string]any{"command": "go test ./... 2>&1 | tee log &>/dev/null"}, true, "default", ""},
		"another path":        {"Bash", map[string]any{"command": "rm -rf ./build"}, true, "default", ""},
		// The limits of a text match: an argument is not a command.
		"as an argument":   {"Bash", map[string]any{"command": "echo rm -rf /"}, true, "default", ""},
		"invalid input":    {"Bash", map[string]any{"command": 1}, true, "default", ""},
		"another tool":     {"Read", map[string]any{"file_path": "rm -rf /"}, true, "default", ""},
		"curl as a suffix": {"Bash", map[string]any{"command": "mycurl x"}, true, "default", ""},
	})

	allowList := mustPolicy(t, `{"default":"deny","rules":[
		{"name":"go","tool":"Bash","action":"allow","commands":["go {test,vet} *","ls","ls *"]}
	]}`)
	checkPolicy(t, allowList, nil, map[string]policyCase{
		"allowed":                 {"Bash", map[string]any{"command": "go test ./..."}, true, "go", "every command matches"},
		"all simple commands":     {"Bash", map[string]any{"command": "ls; ls -la && go vet ./..."}, true, "go", ""},
		"one is not":              {"Bash", map[string]any{"command": "go test ./... && rm -rf /"}, false, "default", ""},
		"piped into another":      {"Bash", map[string]any{"command": "ls -la | sh"}, false, "default", ""},
		"prefix is not enough":    {"Bash", map[string]any{"command": "lsblk"}, false, "default", ""},
		"empty command":           {"Bash", map[string]any{"command": ""}, false, "default", ""},
		"only separators":         {"Bash", map[string]any{"command": " ; && "}, false, "default", ""},
		"whole string is no help": {"Bash", map[string]any{"command": "go test x; curl y"}, false, "default", ""},
	})
}

func TestSplitCommand(t *testing.T) {
	tests := map[string][]string{
		"ls":                         {"ls"},
		"a; b && c || d | e |& f":    {"a", "b", "c", "d", "e", "f"},
		"a & b":                      {"a", "b"},
		"a 2>&1 >&2 &>f <&3 b":       {"a 2>&1 >&2 &>f <&3 b"},
		"a\nb\n\n":                   {"a", "b"},
		"  x   y  ":                  {"x y"},
		"(a; b)":                     {"a", "b"},
		"{ a; }":                     {"a"},
		"echo 'a;b'":                 {"echo 'a", "b'"}, // quotes are not honoured: more pieces, never fewer
		";;&&||":                     nil,
		"find . -exec rm {} \\; x":   {"find . -exec rm {} \\", "x"},
		"if a; then rm -rf /; fi":    {"if a", "then rm -rf /", "fi"},
		"x=$(curl y)":                {"x=$(curl y"},
		"a && (b || (c))":            {"a", "b", "c"},
		"echo \"a && b\" | tr a b &": {"echo \"a", "b\"", "tr a b"},
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, splitCommand(in)); diff != "" {
			t.Errorf("splitCommand(%q) (-want +got):\n%s", in, diff)
		}
	}
}

// FuzzPolicyCommand checks that a deny pattern with leading and trailing
// stars catches its text anywhere in a command, however it is written, and
// that Check never panics.
func FuzzPolicyCommand(f *testing.F) {
	for _, s := range []string{"rm -rf /", "echo ok && rm -rf /", "(rm  -rf /x)", "a|b;c&d", "x 2>&1", "{ rm -rf /; }", "\xff&&\n"} {
		f.Add(s)
	}
	p := mustPolicy(f, `{"rules":[{"tool":"Bash","action":"deny","commands":["*rm -rf /*"]}]}`)
	f.Fuzz(func(t *testing.T, cmd string) {
		raw, err := json.Marshal(map[string]string{"command": cmd})
		if err != nil {
			t.Skip()
		}
		var in BashInput
		_ = json.Unmarshal(raw, &in) // what Bash will run
		d := p.Check("Bash", raw, nil)
		if strings.Contains(strings.Join(strings.Fields(in.Command), " "), "rm -rf /") && d.Allowed {
			t.Errorf("%q allowed: %+v", in.Command, d)
		}
		for _, s := range splitCommand(cmd) {
			if s == "" || s != strings.TrimSpace(s) {
				t.Errorf("splitCommand(%q) has piece %q", cmd, s)
			}
		}
	})
}
