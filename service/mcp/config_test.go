package mcp_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service/mcp"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The file MCP clients share reads as its servers: a command with args, env and cwd, or
// a url with headers; disabled servers and keys of the file talkgraph does not use are
// left out.
func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, `{
	  "globalShortcut": "Ctrl+Space",
	  "mcpServers": {
	    "files": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"], "env": {"DEBUG": "1"}, "cwd": "`+dir+`"},
	    "search": {"type": "streamable-http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t0k"}},
	    "old": {"command": "old-server", "disabled": true}
	  }
	}`)
	got, err := mcp.ReadConfig(path, mcp.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := []mcp.ServerConfig{
		{Name: "files", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv"}, Env: map[string]string{"DEBUG": "1"}, Dir: dir},
		{Name: "search", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer t0k"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("servers:\n got %+v\nwant %+v", got, want)
	}
}

// A malformed file stops talkgraph at start with a message naming the file, the server
// and the field at fault.
func TestReadConfigRefusesMalformedFiles(t *testing.T) {
	many := `{"mcpServers": {"a": {"command": "x"}, "b": {"command": "x"}, "c": {"command": "x"}}}`
	for _, tc := range []struct{ name, text, want string }{
		{"not JSON", "{\n  \"mcpServers\": {,}\n}", `not a JSON object: invalid character ',' looking for beginning of object key string (line 2, column`},
		{"no servers", `{"servers": {}}`, `no "mcpServers" object`},
		{"servers not an object", `{"mcpServers": []}`, `"mcpServers" is not an object of servers by name`},
		{"entry not an object", `{"mcpServers": {"a": "npx"}}`, `server "a": not an object with a command or a url`},
		{"neither", `{"mcpServers": {"a": {"args": []}}}`, `server "a": needs a "command"`},
		{"both", `{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}`, `server "a": has both a "command" and a "url"`},
		{"unknown field", `{"mcpServers": {"a": {"command": "x", "autoApprove": ["write"]}}}`, `server "a": unknown field "autoApprove"`},
		{"typo", `{"mcpServers": {"a": {"comand": "x"}}}`, `server "a": unknown field "comand"`},
		{"args of numbers", `{"mcpServers": {"a": {"command": "x", "args": [1]}}}`, `server "a": "args": want an array of strings`},
		{"env of numbers", `{"mcpServers": {"a": {"command": "x", "env": {"N": 1}}}}`, `server "a": "env": want an object of strings`},
		{"bad env name", `{"mcpServers": {"a": {"command": "x", "env": {"A=B": "1"}}}}`, `server "a": "env": "A=B" is not a variable's name`},
		{"missing cwd", `{"mcpServers": {"a": {"command": "x", "cwd": "/nonexistent/dir"}}}`, `server "a": "cwd": /nonexistent/dir is not a directory`},
		{"bad url", `{"mcpServers": {"a": {"url": "ftp://h/mcp"}}}`, `server "a": "url": want an http or https URL`},
		{"headers with a command", `{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}`, `server "a": "headers" go with a "url"`},
		{"header with a line break", `{"mcpServers": {"a": {"url": "http://h/mcp", "headers": {"A": "b\r\nC: d"}}}}`, `server "a": "headers": "A" is not a header's name, or its value holds a line break`},
		{"sse", `{"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}`, `server "a": "type": the old HTTP+SSE transport is not supported`},
		{"type against command", `{"mcpServers": {"a": {"type": "http", "command": "x"}}}`, `server "a": "type" "http" does not go with a "command"`},
		{"bad name", `{"mcpServers": {"my__server": {"command": "x"}}}`, `server "my__server": a server's name is 1 to 20 letters`},
		{"long name", `{"mcpServers": {"abcdefghijklmnopqrstu": {"command": "x"}}}`, `server "abcdefghijklmnopqrstu": a server's name is 1 to 20`},
		{"too many", many, `3 servers, at most 2 (MCP_MAX_SERVERS)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			limits := mcp.DefaultLimits()
			limits.MaxServers = 2
			_, err := mcp.ReadConfig(path, limits)
			if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %s: …%s…", err, path, tc.want)
			}
		})
	}
	_, err := mcp.ReadConfig("/nonexistent/mcp.json", mcp.DefaultLimits())
	if err == nil || err.Error() != "/nonexistent/mcp.json: no such file or directory" {
		t.Errorf("a missing file: %v", err)
	}
}
