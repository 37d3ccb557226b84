package mcp

import (
	"strings"
	"testing"
)

// What a call's error or the log says of a server reached by URL holds none of the
// secrets of its configuration: the URL's password and query, and its headers' values,
// whatever form of the URL an error quotes (as configured, as net/http quotes it, as
// url.URL.Redacted shows it).
func TestRedactTakesOutTheSecretsOfAServersConfiguration(t *testing.T) {
	s := &server{cfg: ServerConfig{Name: "web", URL: "https://ada:pw-s3cret@mcp.example.com:8443/mcp?token=q-s3cret",
		Headers: map[string]string{"Authorization": "Bearer h-s3cret", "X-Short": "1"}}}
	for _, tc := range []struct{ text, want string }{
		{`Post "https://ada:pw-s3cret@mcp.example.com:8443/mcp?token=q-s3cret": EOF`, `Post "https://mcp.example.com:8443/mcp": EOF`},
		{`Get "https://ada:***@mcp.example.com:8443/mcp?token=q-s3cret": dial tcp: refused`, `Get "https://mcp.example.com:8443/mcp": dial tcp: refused`},
		{`https://ada:xxxxx@mcp.example.com:8443/mcp?token=q-s3cret`, `https://mcp.example.com:8443/mcp`},
		{`the server said token=q-s3cret and pw-s3cret`, `the server said [redacted] and [redacted]`},
		{`it echoed Bearer h-s3cret with 1 header`, `it echoed [redacted] with 1 header`},
	} {
		got := s.redact(tc.text)
		if got != tc.want || strings.Contains(got, "s3cret") {
			t.Errorf("redact(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}
