package servers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/tools"
)

func TestParseConfig(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []ServerConfig
	}{
		"stdio without type": {
			in:   `{"mcpServers": {"echo": {"command": "/bin/echo-mcp", "args": ["-v"], "env": {"A": "1"}}}}`,
			want: []ServerConfig{{Name: "echo", Type: TypeStdio, Command: "/bin/echo-mcp", Args: []string{"-v"}, Env: map[string]string{"A": "1"}}},
		},
		"stdio with type": {
			in:   `{"mcpServers": {"echo": {"type": "stdio", "command": "npx"}}}`,
			want: []ServerConfig{{Name: "echo", Type: TypeStdio, Command: "npx"}},
		},
		"http": {
			in:   `{"mcpServers": {"web": {"type": "http", "url": "https://mcp.example/x", "headers": {"Authorization": "Bearer t"}}}}`,
			want: []ServerConfig{{Name: "web", Type: TypeHTTP, URL: "https://mcp.example/x", Headers: map[string]string{"Authorization": "Bearer t"}}},
		},
		"http without type": {
			in:   `{"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}}}`,
			want: []ServerConfig{{Name: "web", Type: TypeHTTP, URL: "http://127.0.0.1:9/mcp"}},
		},
		"sorted by name, unknown fields ignored": {
			in: `{"mcpServers": {"b": {"command": "b", "cwd": "x"}, "a-1_Z": {"command": "a"}}, "other": true}`,
			want: []ServerConfig{
				{Name: "a-1_Z", Type: TypeStdio, Command: "a"},
				{Name: "b", Type: TypeStdio, Command: "b"},
			},
		},
		"no servers": {in: `{}`},
		"no expansion": {
			in:   `{"mcpServers": {"e": {"command": "x", "env": {"T": "${HOME}"}}}}`,
			want: []ServerConfig{{Name: "e", Type: TypeStdio, Command: "x", Env: map[string]string{"T": "${HOME}"}}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Servers); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string // in the message
	}{
		"not json":          {`{"mcpServers": `, "JSON syntax error"},
		"servers not map":   {`{"mcpServers": []}`, "wrong type"},
		"bad name":          {`{"mcpServers": {"a b": {"command": "x"}}}`, `server name "a b"`},
		"long name":         {`{"mcpServers": {"` + strings.Repeat("a", 65) + `": {"command": "x"}}}`, "server name"},
		"empty name":        {`{"mcpServers": {"": {"command": "x"}}}`, "server name"},
		"nothing":           {`{"mcpServers": {"a": {}}}`, `neither "command" nor "url"`},
		"sse":               {`{"mcpServers": {"a": {"type": "sse", "url": "https://x/"}}}`, `"type": "sse"`},
		"unknown type":      {`{"mcpServers": {"a": {"type": "ws", "url": "https://x/"}}}`, `"type" must be`},
		"stdio with url":    {`{"mcpServers": {"a": {"type": "stdio", "command": "x", "url": "https://x/"}}}`, "not \"url\""},
		"stdio no command":  {`{"mcpServers": {"a": {"type": "stdio", "args": ["x"]}}}`, `"command" is required`},
		"http with command": {`{"mcpServers": {"a": {"type": "http", "url": "https://x/", "command": "x"}}}`, `not "command"`},
		"http no url":       {`{"mcpServers": {"a": {"type": "http"}}}`, `"url" is required`},
		"ftp url":           {`{"mcpServers": {"a": {"url": "ftp://x/"}}}`, "http:// or https://"},
		"relative url":      {`{"mcpServers": {"a": {"type": "http", "url": "/mcp"}}}`, "http:// or https://"},
		"userinfo":          {`{"mcpServers": {"a": {"url": "https://u:p@x/"}}}`, "user information"},
		"args type":         {`{"mcpServers": {"a": {"command": "x", "args": "y"}}}`, `field "args"`},
		"nul in arg":        {`{"mcpServers": {"a": {"command": "x", "args": ["a\u0000b"]}}}`, "NUL"},
		"env name":          {`{"mcpServers": {"a": {"command": "x", "env": {"A=B": "1"}}}}`, "environment variable name"},
		"reserved header":   {`{"mcpServers": {"a": {"url": "https://x/", "headers": {"host": "y"}}}}`, `header "host"`},
		"bad header name":   {`{"mcpServers": {"a": {"url": "https://x/", "headers": {"a b": "y"}}}}`, "valid HTTP token"},
		"header newline":    {`{"mcpServers": {"a": {"url": "https://x/", "headers": {"X-Key": "secret\nvalue"}}}}`, "control character"},
		"too many args":     {`{"mcpServers": {"a": {"command": "x", "args": [` + strings.Repeat(`"a",`, maxArgs) + `"a"]}}}`, "arguments"},
		"invalid utf-8":     {"{\"mcpServers\": {\"a\": {\"command\": \"\xff\"}}}", "UTF-8"},
		"too large":         {`{"x": "` + strings.Repeat("a", MaxConfigBytes) + `"}`, "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.in))
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("err = %q shows a header value", err)
			}
		})
	}
	many := `{"mcpServers": {`
	for i := range MaxServers + 1 {
		if i > 0 {
			many += ","
		}
		many += `"s` + strings.Repeat("x", i) + `": {"command": "x"}`
	}
	if _, err := ParseConfig([]byte(many + "}}")); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("%d servers: err = %v", MaxServers+1, err)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"mcpServers": {"echo": {"command": "/bin/echo-mcp", "args": ["-v"], "env": {"A": "1"}}}}`,
		`{"mcpServers": {"web": {"type": "http", "url": "https://mcp.example/x", "headers": {"Authorization": "Bearer t"}}}}`,
		`{"mcpServers": {"a": {"type": "sse", "url": "https://x/"}}}`,
		`{"mcpServers": {"a": {}}}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		for _, sc := range cfg.Servers {
			if !validName(sc.Name) {
				t.Fatalf("accepted name %q", sc.Name)
			}
			switch sc.Type {
			case TypeStdio:
				if sc.Command == "" || sc.URL != "" {
					t.Fatalf("bad stdio server %+v", sc)
				}
			case TypeHTTP:
				if checkURL(sc.URL) != nil || sc.Command != "" {
					t.Fatalf("bad http server %+v", sc)
				}
			default:
				t.Fatalf("type %q", sc.Type)
			}
			// The allow-list must not panic on anything the parser accepts.
			(&AllowList{}).Check(sc)
		}
	})
}

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	ws, err := tools.NewWorkspace(filepath.Join(dir, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(ws.Root(), ConfigFile)
	if _, err := readConfig(ws); !errors.Is(err, errNoConfig) {
		t.Fatalf("missing: err = %v", err)
	}
	os.WriteFile(p, []byte(`{}`), 0o644)
	if b, err := readConfig(ws); err != nil || string(b) != `{}` {
		t.Fatalf("regular: %q, %v", b, err)
	}
	os.Remove(p)

	// A symlink out of the workspace is refused, its target never read.
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("worker secret"), 0o600)
	os.Symlink(secret, p)
	if b, err := readConfig(ws); err == nil || strings.Contains(err.Error(), "worker secret") || len(b) > 0 {
		t.Fatalf("symlink out: %q, %v", b, err)
	}
	os.Remove(p)

	// A FIFO would block a plain open; it is refused at once.
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	if _, err := readConfig(ws); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("fifo: err = %v", err)
	}
	os.Remove(p)

	os.WriteFile(p, make([]byte, MaxConfigBytes+1), 0o644)
	if _, err := readConfig(ws); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("too large: err = %v", err)
	}
}

func TestToolName(t *testing.T) {
	long := strings.Repeat("s", 64)
	tests := map[string]struct {
		server, tool, want string
	}{
		"plain":     {"echo", "echo", "mcp__echo__echo"},
		"dots":      {"fs", "read.file/x", "mcp__fs__read_file_x"},
		"long":      {long, "t", ToolName(long, "t")},
		"long tool": {"s", strings.Repeat("t", 80), ToolName("s", strings.Repeat("t", 80))},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ToolName(tc.server, tc.tool)
			if got != tc.want || len(got) > MaxToolName {
				t.Errorf("ToolName = %q (%d bytes), want %q", got, len(got), tc.want)
			}
			for _, c := range got {
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
					t.Errorf("ToolName = %q has %q", got, c)
				}
			}
		})
	}
	if ToolName(long, "a") == ToolName(long, "b") {
		t.Error("shortened names collide")
	}
}
