// Package servers starts the MCP servers a conversation's workspace declares
// in .mcp.json — stdio processes and streamable HTTP endpoints, as far as
// the operator's allow-list permits — and offers their tools to the agent.
package servers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/talkide/platform/internal/tools"
)

// ConfigFile is the name of the declaration file at the workspace root.
const ConfigFile = ".mcp.json"

// Limits of a .mcp.json file.
const (
	MaxConfigBytes = 256 << 10 // the file's size
	MaxServers     = 32        // servers declared in one file
	maxArgs        = 256       // arguments of one stdio server
	maxEnv         = 128       // environment variables of one stdio server
	maxHeaders     = 64        // headers of one HTTP server
	maxValueBytes  = 16 << 10  // one command, argument, URL, variable or header
)

// ErrInvalidConfig is wrapped by every error about the content of a
// .mcp.json file.
var ErrInvalidConfig = errors.New("invalid " + ConfigFile)

// Transport kinds of a server.
const (
	TypeStdio = "stdio"
	TypeHTTP  = "http"
)

// ServerConfig is one server declared in .mcp.json.
type ServerConfig struct {
	Name string
	Type string // TypeStdio or TypeHTTP

	// Stdio servers.
	Command string
	Args    []string
	Env     map[string]string

	// HTTP servers.
	URL     string
	Headers map[string]string // never logged or shown: they may hold credentials
}

// equal reports whether two declarations start the same server.
func (c ServerConfig) equal(o ServerConfig) bool {
	return c.Name == o.Name && c.Type == o.Type && c.Command == o.Command &&
		slices.Equal(c.Args, o.Args) && maps.Equal(c.Env, o.Env) &&
		c.URL == o.URL && maps.Equal(c.Headers, o.Headers)
}

// Config is a parsed .mcp.json: its servers, sorted by name.
type Config struct {
	Servers []ServerConfig
}

// configFile is the JSON form, Claude Code's:
//
//	{"mcpServers": {"name": {"command": "…", "args": […], "env": {…}},
//	                "other": {"type": "http", "url": "https://…", "headers": {…}}}}
type configFile struct {
	MCPServers map[string]json.RawMessage `json:"mcpServers"`
}

type serverJSON struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// ParseConfig parses the content of a .mcp.json file. Server names are 1–64
// of A–Z a–z 0–9 _ -. A server's "type" is "stdio" (the default when a
// "command" is given) or "http" (the default when only a "url" is given);
// "sse" and anything else are refused. Fields other than those above are
// ignored, as Claude Code ignores them; values are taken literally (no
// ${VAR} expansion: the worker's environment is not the workspace's to
// read). Every error wraps ErrInvalidConfig and names the server.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, configError("", fmt.Sprintf("the file is larger than %d bytes", MaxConfigBytes))
	}
	if !utf8.Valid(data) {
		return nil, configError("", "the file is not valid UTF-8")
	}
	var f configFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, configError("", "not a JSON object with \"mcpServers\": "+jsonProblem(err))
	}
	if len(f.MCPServers) > MaxServers {
		return nil, configError("", fmt.Sprintf("%d servers declared; at most %d are accepted", len(f.MCPServers), MaxServers))
	}
	cfg := &Config{}
	for name, raw := range f.MCPServers {
		sc, err := parseServer(name, raw)
		if err != nil {
			return nil, err
		}
		cfg.Servers = append(cfg.Servers, sc)
	}
	sort.Slice(cfg.Servers, func(i, j int) bool { return cfg.Servers[i].Name < cfg.Servers[j].Name })
	return cfg, nil
}

func parseServer(name string, raw json.RawMessage) (ServerConfig, error) {
	if !validName(name) {
		return ServerConfig{}, configError("", fmt.Sprintf("server name %q: want 1-64 of A-Z a-z 0-9 _ -", shorten(name)))
	}
	var sj serverJSON
	if err := json.Unmarshal(raw, &sj); err != nil {
		return ServerConfig{}, configError(name, jsonProblem(err))
	}
	sc := ServerConfig{Name: name, Type: sj.Type}
	if sc.Type == "" {
		switch {
		case sj.Command != "":
			sc.Type = TypeStdio
		case sj.URL != "":
			sc.Type = TypeHTTP
		default:
			return sc, configError(name, `neither "command" nor "url" is set`)
		}
	}
	switch sc.Type {
	case TypeStdio:
		if sj.URL != "" || len(sj.Headers) > 0 {
			return sc, configError(name, `a stdio server takes "command", "args" and "env", not "url" or "headers"`)
		}
		if sj.Command == "" {
			return sc, configError(name, `"command" is required for a stdio server`)
		}
		if len(sj.Args) > maxArgs {
			return sc, configError(name, fmt.Sprintf("%d arguments; at most %d are accepted", len(sj.Args), maxArgs))
		}
		if len(sj.Env) > maxEnv {
			return sc, configError(name, fmt.Sprintf("%d environment variables; at most %d are accepted", len(sj.Env), maxEnv))
		}
		if err := checkValue("command", sj.Command); err != nil {
			return sc, configError(name, err.Error())
		}
		for i, a := range sj.Args {
			if err := checkValue(fmt.Sprintf("args[%d]", i), a); err != nil {
				return sc, configError(name, err.Error())
			}
		}
		for k, v := range sj.Env {
			if !validEnvName(k) {
				return sc, configError(name, fmt.Sprintf("environment variable name %q: want a letter or _ then letters, digits or _", shorten(k)))
			}
			if err := checkValue("env "+k, v); err != nil {
				return sc, configError(name, err.Error())
			}
		}
		sc.Command, sc.Args, sc.Env = sj.Command, sj.Args, sj.Env
	case TypeHTTP:
		if sj.Command != "" || len(sj.Args) > 0 || len(sj.Env) > 0 {
			return sc, configError(name, `an http server takes "url" and "headers", not "command", "args" or "env"`)
		}
		if err := checkURL(sj.URL); err != nil {
			return sc, configError(name, err.Error())
		}
		if len(sj.Headers) > maxHeaders {
			return sc, configError(name, fmt.Sprintf("%d headers; at most %d are accepted", len(sj.Headers), maxHeaders))
		}
		for k, v := range sj.Headers {
			if err := checkHeader(k, v); err != nil {
				return sc, configError(name, err.Error())
			}
		}
		sc.URL, sc.Headers = sj.URL, sj.Headers
	case "sse":
		return sc, configError(name, `"type": "sse" (the deprecated HTTP+SSE transport) is not supported; use "type": "http" (streamable HTTP)`)
	default:
		return sc, configError(name, fmt.Sprintf(`"type" must be "stdio" or "http", got %q`, shorten(sc.Type)))
	}
	return sc, nil
}

// validName reports whether s is a valid server name.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 256 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func checkValue(field, v string) error {
	switch {
	case len(v) > maxValueBytes:
		return fmt.Errorf("%s is longer than %d bytes", field, maxValueBytes)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", field)
	}
	return nil
}

// checkURL accepts an absolute http or https URL without user information.
func checkURL(s string) error {
	if s == "" {
		return errors.New(`"url" is required for an http server`)
	}
	if err := checkValue("url", s); err != nil {
		return err
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("url %q does not parse", shorten(s))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("url %q: want an http:// or https:// URL", shorten(s))
	case u.Host == "":
		return fmt.Errorf("url %q has no host", shorten(s))
	case u.User != nil:
		return errors.New("url must not contain user information; use \"headers\"")
	}
	return nil
}

// reservedHeaders are set by the MCP transport or by HTTP itself.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Content-Type": true, "Accept": true,
	"Connection": true, "Transfer-Encoding": true, "Upgrade": true, "Te": true, "Trailer": true,
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Last-Event-Id": true,
}

// checkHeader validates a header without ever quoting its value, which may
// be a credential.
func checkHeader(name, value string) error {
	if name == "" || len(name) > 256 {
		return fmt.Errorf("header name %q is empty or too long", shorten(name))
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return fmt.Errorf("header name %q is not a valid HTTP token", shorten(name))
		}
	}
	if reservedHeaders[canonicalHeader(name)] {
		return fmt.Errorf("header %q is set by the transport and cannot be declared", name)
	}
	if len(value) > maxValueBytes {
		return fmt.Errorf("the value of header %q is longer than %d bytes", name, maxValueBytes)
	}
	for _, c := range []byte(value) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("the value of header %q contains a control character", name)
		}
	}
	return nil
}

func canonicalHeader(name string) string {
	b := []byte(strings.ToLower(name))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}

func configError(server, msg string) error {
	if server == "" {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, msg)
	}
	return fmt.Errorf("%w: server %q: %s", ErrInvalidConfig, server, msg)
}

// jsonProblem describes a JSON decoding error without quoting the input.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("JSON syntax error at byte %d", se.Offset)
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("field %q has the wrong type (%s)", te.Field, te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("wrong type (%s)", te.Value)
	default:
		return "not valid JSON"
	}
}

// shorten cuts s for a message.
func shorten(s string) string {
	if len(s) <= 80 {
		return s
	}
	i := 77
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// errNoConfig is returned by readConfig when the workspace has no
// .mcp.json.
var errNoConfig = errors.New("no " + ConfigFile)

// readConfig reads ws's .mcp.json: a regular file inside the workspace (a
// symlink that leads out of it, a FIFO or a device is refused) of at most
// MaxConfigBytes. It returns errNoConfig when there is none.
func readConfig(ws *tools.Workspace) ([]byte, error) {
	p, err := ws.Resolve(ConfigFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errNoConfig
		}
		return nil, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoConfig
	}
	if err != nil {
		return nil, fmt.Errorf("%s: cannot be opened (%s)", ConfigFile, rel(ws, err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %s", ConfigFile, rel(ws, err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", ConfigFile)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(f, MaxConfigBytes+1)); err != nil {
		return nil, fmt.Errorf("%s: %s", ConfigFile, rel(ws, err))
	}
	if buf.Len() > MaxConfigBytes {
		return nil, configError("", fmt.Sprintf("the file is larger than %d bytes", MaxConfigBytes))
	}
	return buf.Bytes(), nil
}

// rel shows err with the workspace's own path left out.
func rel(ws *tools.Workspace, err error) string {
	return strings.ReplaceAll(err.Error(), ws.Root()+string(filepath.Separator), "")
}
