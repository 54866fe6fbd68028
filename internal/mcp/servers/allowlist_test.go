package servers

import (
	"errors"
	"strings"
	"testing"
)

func TestAllowList(t *testing.T) {
	list, err := ParseAllowList([]byte(`{
		"stdio": [
			{"name": "echo", "command": "/usr/local/bin/echo-mcp"},
			{"command": "/usr/bin/uvx", "args": ["mcp-server-time"]},
			{"command_glob": "npx -y @modelcontextprotocol/server-*", "env": ["GITHUB_*", "DEBUG"]},
			{"command": "/opt/any-args"}
		],
		"http": [
			{"url_prefix": "https://mcp.internal.example/"},
			{"url_prefix": "http://127.0.0.1:8080/mcp"},
			{"name": "docs", "url_prefix": "https://docs.example"}
		]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	stdio := func(name, command string, args ...string) ServerConfig {
		return ServerConfig{Name: name, Type: TypeStdio, Command: command, Args: args}
	}
	withEnv := func(sc ServerConfig, env map[string]string) ServerConfig { sc.Env = env; return sc }
	web := func(name, url string) ServerConfig { return ServerConfig{Name: name, Type: TypeHTTP, URL: url} }
	tests := map[string]struct {
		sc   ServerConfig
		want string // "" when allowed, else in the error
	}{
		"exact command and name":     {sc: stdio("echo", "/usr/local/bin/echo-mcp", "-v")},
		"wrong name":                 {sc: stdio("other", "/usr/local/bin/echo-mcp"), want: "no stdio rule"},
		"bare name is not the path":  {sc: stdio("echo", "echo-mcp"), want: "no stdio rule"},
		"exact args":                 {sc: stdio("t", "/usr/bin/uvx", "mcp-server-time")},
		"other args":                 {sc: stdio("t", "/usr/bin/uvx", "mcp-server-time", "--evil"), want: "no stdio rule"},
		"no args where args are set": {sc: stdio("t", "/usr/bin/uvx"), want: "no stdio rule"},
		"glob":                       {sc: stdio("gh", "npx", "-y", "@modelcontextprotocol/server-github")},
		"glob other package":         {sc: stdio("gh", "npx", "-y", "evil"), want: "no stdio rule"},
		"glob env allowed":           {sc: withEnv(stdio("gh", "npx", "-y", "@modelcontextprotocol/server-github"), map[string]string{"GITHUB_TOKEN": "x", "DEBUG": "1"})},
		"glob env refused":           {sc: withEnv(stdio("gh", "npx", "-y", "@modelcontextprotocol/server-github"), map[string]string{"LD_PRELOAD": "./x.so"}), want: "environment variable LD_PRELOAD"},
		"env refused without env":    {sc: withEnv(stdio("a", "/opt/any-args"), map[string]string{"NODE_OPTIONS": "--require ./x"}), want: "NODE_OPTIONS"},
		"any args":                   {sc: stdio("a", "/opt/any-args", "x", "y")},
		"http prefix":                {sc: web("w", "https://mcp.internal.example/a/b?x=1")},
		"http host case":             {sc: web("w", "HTTPS://MCP.internal.example/")},
		"http no path":               {sc: web("w", "https://mcp.internal.example")},
		"http other host":            {sc: web("w", "https://mcp.internal.example.evil/"), want: "no http rule"},
		"http other scheme":          {sc: web("w", "http://mcp.internal.example/"), want: "no http rule"},
		"http other port":            {sc: web("w", "https://mcp.internal.example:444/"), want: "no http rule"},
		"http dot segments":          {sc: web("w", "http://127.0.0.1:8080/mcp/../admin"), want: "no http rule"},
		"http encoded dots":          {sc: web("w", "http://127.0.0.1:8080/mcp/%2e%2e/admin"), want: "no http rule"},
		"http path boundary":         {sc: web("w", "http://127.0.0.1:8080/mcpx"), want: "no http rule"},
		"http path exact":            {sc: web("w", "http://127.0.0.1:8080/mcp")},
		"http path below":            {sc: web("w", "http://127.0.0.1:8080/mcp/v1")},
		"http named rule":            {sc: web("docs", "https://docs.example/mcp")},
		"http named rule other name": {sc: web("x", "https://docs.example/mcp"), want: "no http rule"},
		"http query redacted":        {sc: web("x", "https://nowhere.example/?key=secret"), want: "nowhere.example"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := list.Check(tc.sc)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrNotAllowed with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("err = %q shows a query value", err)
			}
		})
	}
}

func TestAllowListDefaultAllowsNothing(t *testing.T) {
	empty, err := ParseAllowList([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, list := range map[string]*AllowList{"nil": nil, "empty": empty} {
		for _, sc := range []ServerConfig{
			{Name: "a", Type: TypeStdio, Command: "/bin/true"},
			{Name: "b", Type: TypeHTTP, URL: "https://x/"},
		} {
			if err := list.Check(sc); !errors.Is(err, ErrNotAllowed) {
				t.Errorf("%s list: %s allowed (%v)", name, sc.Type, err)
			}
		}
	}
}

func TestParseAllowListErrors(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"not json":           {`{`, ""},
		"unknown top field":  {`{"sse": []}`, `unknown field "sse"`},
		"unknown rule field": {`{"stdio": [{"command": "x", "cwd": "/"}]}`, `stdio[0]: json: unknown field "cwd"`},
		"no command":         {`{"stdio": [{"name": "x"}]}`, `stdio[0]: "command" or "command_glob" is required`},
		"both":               {`{"stdio": [{"command": "x", "command_glob": "x *"}]}`, "not both"},
		"glob with args":     {`{"stdio": [{"command_glob": "x *", "args": []}]}`, `"args" goes with "command"`},
		"trailing escape":    {`{"stdio": [{"command_glob": "x \\"}]}`, "trailing"},
		"bad name":           {`{"stdio": [{"name": "a b", "command": "x"}]}`, "valid server name"},
		"empty env":          {`{"stdio": [{"command": "x", "env": [""]}]}`, "empty entry"},
		"no prefix":          {`{"http": [{}]}`, `http[0]: "url_prefix" is required`},
		"relative prefix":    {`{"http": [{"url_prefix": "/mcp"}]}`, "http:// or https://"},
		"prefix query":       {`{"http": [{"url_prefix": "https://x/?a=b"}]}`, "only scheme"},
		"trailing data":      {`{} {}`, "trailing data"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAllowList([]byte(tc.in))
			if !errors.Is(err, ErrInvalidAllowList) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidAllowList with %q", err, tc.want)
			}
		})
	}
}

func FuzzParseAllowList(f *testing.F) {
	for _, s := range []string{
		`{"stdio": [{"name": "echo", "command": "/x"}, {"command_glob": "npx *", "env": ["A_*"]}], "http": [{"url_prefix": "https://h/p"}]}`,
		`{"stdio": [{"command": "x", "args": ["a"]}]}`,
		`{"http": [{"url_prefix": "http://[::1]:80/"}]}`,
	} {
		f.Add([]byte(s), "npx -y a", "https://h/p/x")
	}
	f.Fuzz(func(t *testing.T, data []byte, command, url string) {
		list, err := ParseAllowList(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidAllowList) {
				t.Fatalf("error %v does not wrap ErrInvalidAllowList", err)
			}
			return
		}
		for _, sc := range []ServerConfig{
			{Name: "a", Type: TypeStdio, Command: command, Env: map[string]string{"A_B": "1"}},
			{Name: "a", Type: TypeHTTP, URL: url},
		} {
			if err := list.Check(sc); err != nil && !errors.Is(err, ErrNotAllowed) {
				t.Fatalf("Check error %v does not wrap ErrNotAllowed", err)
			}
		}
	})
}
