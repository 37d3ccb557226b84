package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ServerConfig is one server of the MCP configuration file: a command talkgraph starts
// and speaks to over its stdin and stdout, or the URL of one reached over streamable HTTP.
type ServerConfig struct {
	// Name is the server's name in the file; its tools are named mcp__<Name>__<tool>.
	Name string
	// Command, Args, Env and Dir start a server over stdio. Env is added to the few
	// variables of talkgraph's own environment a server gets (see Inherited).
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	// URL and Headers reach a server over streamable HTTP; Headers go with every
	// request (an Authorization header, say) and are never logged.
	URL     string
	Headers map[string]string
}

// Stdio reports whether talkgraph starts the server (rather than reaching it by URL).
func (s ServerConfig) Stdio() bool { return s.Command != "" }

// Limits bound what MCP servers can make talkgraph hold or wait for.
type Limits struct {
	// MaxServers is the most servers the configuration file may name.
	MaxServers int
	// MaxTools is the most tools of one server offered; the rest are left out (logged).
	MaxTools int
	// MaxResultBytes bounds the text of one call's result the model reads, and what its
	// progress notifications print; the rest is cut, and the model is told.
	MaxResultBytes int
	// MaxMessageBytes bounds one message a server sends (a line over stdio, an event or
	// a response over HTTP); a server that sends a larger one is restarted.
	MaxMessageBytes int
	// CallTimeout ends a call that runs longer (the server is told to cancel it).
	CallTimeout time.Duration
	// StartTimeout bounds a server's start: its process or connection, the MCP
	// handshake and the listing of its tools.
	StartTimeout time.Duration
	// StartAttempts is how many starts in a row a server that never came up may fail
	// before it is given up (until talkgraph starts again). A server that was up is
	// started again, with backoff, however often it dies.
	StartAttempts int
}

// DefaultLimits are the limits when nothing else is said.
func DefaultLimits() Limits {
	return Limits{
		MaxServers:      20,
		MaxTools:        100,
		MaxResultBytes:  64 << 10,
		MaxMessageBytes: 4 << 20,
		CallTimeout:     2 * time.Minute,
		StartTimeout:    time.Minute,
		StartAttempts:   5,
	}
}

// maxConfigBytes bounds the configuration file.
const maxConfigBytes = 1 << 20

// maxServerName bounds a server's name: with "mcp__" and "__" it leaves a tool at least
// 37 of the 64 characters a model's tool name may have.
const maxServerName = 20

// serverNameRE is a server's name: letters, digits, - and _, never two _ in a row nor one
// at either end, so that mcp__<server>__<tool> says where the server's name ends.
var serverNameRE = regexp.MustCompile(`^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$`)

// envNameRE is a variable's name in env.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// headerNameRE is an HTTP header's name (a token).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// serverFields are the fields of a server's entry that talkgraph reads.
var serverFields = []string{"command", "args", "env", "cwd", "url", "headers", "type", "disabled"}

// ReadConfig reads the MCP configuration file at path, in the shape MCP clients share:
//
//	{"mcpServers": {
//	  "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"], "env": {"KEY": "value"}},
//	  "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer …"}}
//	}}
//
// Each server has a command (with args, env and cwd, all optional) or a url (with
// headers); "type" may say which ("stdio", "http" or "streamable-http"), and
// "disabled": true leaves a server out. Fields a server's entry has besides these are
// refused, so that a typing mistake, or a setting of another client that talkgraph does
// not honour (such as one that approves tools), is not silently ignored. Keys of the
// file besides "mcpServers" are ignored. The servers come back by name.
//
// The error names the file, the server and the field at fault.
func ReadConfig(path string, limits Limits) ([]ServerConfig, error) {
	servers, err := readConfig(path, limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return servers, nil
}

func readConfig(path string, limits Limits) ([]ServerConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Unwrap(err) // the path is said once, by ReadConfig
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, errors.Unwrap(err)
	}
	if len(raw) > maxConfigBytes {
		return nil, fmt.Errorf("the file is larger than %d bytes", maxConfigBytes)
	}
	var top map[string]json.RawMessage
	if err := decode(raw, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %s", where(raw, err))
	}
	entries, ok := top["mcpServers"]
	if !ok {
		return nil, errors.New(`no "mcpServers" object`)
	}
	var byName map[string]json.RawMessage
	if err := decode(entries, &byName); err != nil || byName == nil {
		return nil, errors.New(`"mcpServers" is not an object of servers by name`)
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []ServerConfig
	for _, name := range names {
		s, skip, err := readServer(name, byName[name])
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", name, err)
		}
		if !skip {
			out = append(out, s)
		}
	}
	if len(out) > limits.MaxServers {
		return nil, fmt.Errorf("%d servers, at most %d (MCP_MAX_SERVERS)", len(out), limits.MaxServers)
	}
	return out, nil
}

// readServer reads one server's entry; skip reports one that says "disabled": true.
func readServer(name string, raw json.RawMessage) (s ServerConfig, skip bool, err error) {
	if len(name) > maxServerName || !serverNameRE.MatchString(name) {
		return s, false, fmt.Errorf("a server's name is 1 to %d letters, digits, - and _ (never two _ in a row, nor one at either end), so that its tools can be named mcp__<server>__<tool>", maxServerName)
	}
	var fields map[string]json.RawMessage
	if err := decode(raw, &fields); err != nil || fields == nil {
		return s, false, errors.New("not an object with a command or a url")
	}
	for key := range fields {
		if !slices.Contains(serverFields, key) {
			return s, false, fmt.Errorf("unknown field %q (talkgraph reads %s; tool policies are set with TOOL_POLICIES)", key, strings.Join(serverFields, ", "))
		}
	}
	s.Name = name
	field := func(key string, into any, want string) error {
		v, ok := fields[key]
		if !ok || string(v) == "null" {
			return nil
		}
		if err := decode(v, into); err != nil {
			return fmt.Errorf("%q: want %s", key, want)
		}
		return nil
	}
	var typ string
	var disabled bool
	for _, f := range []struct {
		key  string
		into any
		want string
	}{
		{"command", &s.Command, "a string"},
		{"args", &s.Args, "an array of strings"},
		{"env", &s.Env, "an object of strings"},
		{"cwd", &s.Dir, "a string"},
		{"url", &s.URL, "a string"},
		{"headers", &s.Headers, "an object of strings"},
		{"type", &typ, "a string"},
		{"disabled", &disabled, "true or false"},
	} {
		if err := field(f.key, f.into, f.want); err != nil {
			return s, false, err
		}
	}
	if disabled {
		return s, true, nil
	}
	stdioOnly := len(s.Args) > 0 || len(s.Env) > 0 || s.Dir != ""
	switch {
	case s.Command == "" && s.URL == "":
		return s, false, errors.New(`needs a "command" (a server talkgraph starts) or a "url" (one it reaches over streamable HTTP)`)
	case s.Command != "" && s.URL != "":
		return s, false, errors.New(`has both a "command" and a "url": give one`)
	case s.URL != "" && stdioOnly:
		return s, false, errors.New(`"args", "env" and "cwd" go with a "command", not a "url"`)
	case s.Command != "" && len(s.Headers) > 0:
		return s, false, errors.New(`"headers" go with a "url", not a "command"`)
	}
	switch typ {
	case "", "stdio", "http", "streamable-http", "streamableHttp":
	case "sse":
		return s, false, errors.New(`"type": the old HTTP+SSE transport is not supported; give the server's streamable HTTP endpoint`)
	default:
		return s, false, fmt.Errorf(`"type": want "stdio", "http" or "streamable-http", got %q`, typ)
	}
	if (typ == "stdio") != (s.Command != "") && typ != "" {
		return s, false, fmt.Errorf(`"type" %q does not go with a %s`, typ, map[bool]string{true: `"command"`, false: `"url"`}[s.Command != ""])
	}
	for key, v := range map[string]string{"command": s.Command, "cwd": s.Dir, "url": s.URL} {
		if strings.ContainsRune(v, 0) {
			return s, false, fmt.Errorf("%q holds a NUL character", key)
		}
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			return s, false, fmt.Errorf(`"args"[%d] holds a NUL character`, i)
		}
	}
	for k, v := range s.Env {
		if !envNameRE.MatchString(k) || strings.ContainsRune(v, 0) {
			return s, false, fmt.Errorf(`"env": %q is not a variable's name, or its value holds a NUL character`, k)
		}
	}
	if s.Dir != "" {
		if fi, err := os.Stat(s.Dir); err != nil || !fi.IsDir() {
			return s, false, fmt.Errorf(`"cwd": %s is not a directory`, s.Dir)
		}
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, false, errors.New(`"url": want an http or https URL, such as https://mcp.example.com/mcp`)
		}
	}
	for k, v := range s.Headers {
		if !headerNameRE.MatchString(k) || strings.ContainsAny(v, "\r\n\x00") {
			return s, false, fmt.Errorf(`"headers": %q is not a header's name, or its value holds a line break`, k)
		}
	}
	return s, false, nil
}

// decode decodes one JSON value into v, refusing anything after it.
func decode(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more JSON after the value")
	}
	return nil
}

// where says where in raw a decoding error is, by line and column.
func where(raw []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var off int64
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	default:
		return err.Error()
	}
	off = min(off, int64(len(raw)))
	before := raw[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("%v (line %d, column %d)", err, line, col)
}
