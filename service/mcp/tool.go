package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkgraph/talkgraph/service"
)

// Prefix begins the name of every MCP tool: mcp__<server>__<tool>.
const Prefix = "mcp__"

// Limits of a tool's listing, fixed: a model's tool name has at most 64 characters, a
// description is cut, and a schema larger than this leaves its tool out.
const (
	maxNameLen        = 64
	maxDescription    = 4096
	maxSchemaBytes    = 64 << 10
	maxErrorText      = 2000
	maxRawArgumentLen = 1 << 20
)

// toolNameRE is what a tool's own name may hold to be offered (as part of a model's
// tool name, which allows nothing else).
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Tool is a tool of an MCP server as the openai agent offers it: named
// mcp__<server>__<tool>, with the server's description and input schema, and a default
// policy from its annotations (readOnlyHint: ALLOW, otherwise ASK). Its calls go to the
// server as it is when they are made: a tool listed before a restart works after it.
type Tool struct {
	s         *server
	name      string // the server's name for it
	full      string
	desc      string
	params    map[string]any
	schema    string              // params as JSON text
	validator *service.JSONSchema // nil when the schema does not compile
	policy    service.ToolPolicy
}

// Name is mcp__<server>__<tool>.
func (t *Tool) Name() string { return t.full }

// Server is the name of the tool's server.
func (t *Tool) Server() string { return t.s.cfg.Name }

// Description is the server's description of the tool.
func (t *Tool) Description() string { return t.desc }

// Parameters is the tool's input schema, decoded; it must not be changed.
func (t *Tool) Parameters() map[string]any { return t.params }

// InputSchema is the tool's input schema as JSON text.
func (t *Tool) InputSchema() string { return t.schema }

// DefaultPolicy is ALLOW for a tool its server annotates readOnlyHint, ASK for any other.
func (t *Tool) DefaultPolicy() service.ToolPolicy { return t.policy }

// Output is where a call's progress goes (service.ToolHandle is one).
type Output interface {
	Output(delta string) error
}

// newTool makes the tool t of s, or says why it is left out.
func (s *server) newTool(t *sdk.Tool) (*Tool, error) {
	if !toolNameRE.MatchString(t.Name) {
		return nil, errors.New("its name holds characters other than letters, digits, - and _")
	}
	full := Prefix + s.cfg.Name + "__" + t.Name
	if len(full) > maxNameLen {
		return nil, fmt.Errorf("%s is longer than the %d characters a model's tool name may have", full, maxNameLen)
	}
	schema := []byte(`{"type":"object"}`)
	if t.InputSchema != nil {
		var err error
		if schema, err = json.Marshal(t.InputSchema); err != nil {
			return nil, fmt.Errorf("its input schema: %v", err)
		}
	}
	if len(schema) > maxSchemaBytes {
		return nil, fmt.Errorf("its input schema has %d bytes, more than %d", len(schema), maxSchemaBytes)
	}
	var params map[string]any
	if err := json.Unmarshal(schema, &params); err != nil || params == nil {
		return nil, errors.New("its input schema is not a JSON object")
	}
	tool := &Tool{s: s, name: t.Name, full: full, params: params, schema: string(schema), policy: service.PolicyAsk}
	v, err := service.CompileSchema(tool.schema)
	if err != nil {
		s.log.Warn("mcp tool's input schema does not compile: its arguments go to the server unchecked", "tool", full, "err", err)
	} else {
		tool.validator = v
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if a := t.Annotations; a != nil {
		if desc == "" {
			desc = a.Title
		}
		if a.ReadOnlyHint {
			tool.policy = service.PolicyAllow
		}
	}
	tool.desc = cut(desc, maxDescription)
	return tool, nil
}

// Call calls the tool with arguments, the JSON text a model wrote, and returns the text
// of its result. Arguments that are not a JSON object or do not satisfy the tool's input
// schema are refused here, and never reach the server. Progress the server reports is
// written to out as it comes. The error, for the model to read, says why a call failed:
// the tool's own error, a server that is not up, one that refused the call, one that
// broke off during the call (and why: its process exited, it wrote a line longer than
// Limits.MaxMessageBytes or something that is not JSON-RPC, the HTTP server went
// away…), a call that took longer than Limits.CallTimeout; when ctx ends (the run was
// stopped), the call is cancelled (the server is told) and ctx's error returned at once.
func (t *Tool) Call(ctx context.Context, arguments string, out Output) (string, error) {
	s := t.s
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	if err := t.check(arguments); err != nil {
		s.count(t.name, outcomeInvalid)
		return "", err
	}
	c := s.current()
	if c == nil {
		s.count(t.name, outcomeUnavailable)
		return "", fmt.Errorf("the MCP server %q is not available now (%s); try again later", s.cfg.Name, s.State())
	}
	cctx, cancel := context.WithTimeout(ctx, s.m.limits.CallTimeout)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)() // the connection ends: so does the call

	p := s.track(out)
	defer s.untrack(p)
	params := &sdk.CallToolParams{Name: t.name, Arguments: json.RawMessage(arguments)}
	params.SetProgressToken(p.token)
	res, err := c.cs.CallTool(cctx, params)
	switch {
	case err == nil && res.IsError:
		s.count(t.name, outcomeError)
		return "", errors.New(cut(resultText(res, s.m.limits.MaxResultBytes), maxErrorText))
	case err == nil:
		s.count(t.name, outcomeOK)
		return resultText(res, s.m.limits.MaxResultBytes), nil
	case ctx.Err() != nil:
		s.count(t.name, outcomeCancelled)
		return "", ctx.Err()
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		s.count(t.name, outcomeTimeout)
		return "", fmt.Errorf("the call took longer than %s and was stopped", s.m.limits.CallTimeout)
	}
	ending := t.connectionEnding(ctx, cctx, c, err)
	if ctx.Err() != nil {
		s.count(t.name, outcomeCancelled)
		return "", ctx.Err()
	}
	if ending {
		// The supervisor closes the connection, and says why, at once.
		c.broken(err)
		select {
		case <-c.ctx.Done():
		case <-ctx.Done():
			s.count(t.name, outcomeCancelled)
			return "", ctx.Err()
		}
		s.count(t.name, outcomeFailed)
		return "", fmt.Errorf("the MCP server %q broke off during the call: %v", s.cfg.Name, context.Cause(c.ctx))
	}
	if rpc := answer(err); rpc != nil {
		s.count(t.name, outcomeError)
		return "", fmt.Errorf("the MCP server %q refused the call: %s", s.cfg.Name, cut(rpc.Message, maxErrorText))
	}
	s.count(t.name, outcomeFailed)
	return "", fmt.Errorf("the MCP server %q failed: %s", s.cfg.Name, s.redact(cut(err.Error(), maxErrorText)))
}

// pingTimeout bounds the ping that tells whether a server reached by URL is still
// there after a call failed.
const pingTimeout = 5 * time.Second

// connectionEnding reports whether a call's failure, err, is its connection's: the
// connection ended, or is ending (a stdio connection's read or write failed, the SDK
// says it closed, the server lost the session), or a server reached by URL no longer
// answers a ping. Otherwise the failure was the call's own (the server refused it, or
// answered something that is not a result) and the connection works on.
func (t *Tool) connectionEnding(ctx, cctx context.Context, c *conn, err error) bool {
	if c.ctx.Err() != nil || errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing) {
		return true
	}
	if c.proc != nil {
		failure, _ := c.failed()
		return failure != nil
	}
	if answer(err) != nil {
		return false // the server answered: the connection works
	}
	pctx, cancel := context.WithTimeout(cctx, pingTimeout)
	defer cancel()
	perr := c.cs.Ping(pctx, nil)
	switch {
	case perr == nil, answer(perr) != nil:
		return false // an answer
	case ctx.Err() != nil, pctx.Err() != nil:
		return c.ctx.Err() != nil // no answer in time: only the connection's end says more
	}
	c.broken(perr) // the server is unreachable: the supervisor says why from the ping's error
	return true
}

// The codes of the errors the SDK makes up itself with the type of a server's answer
// (jsonrpc.Error): for a call on a connection that is closing, and for a request its
// transport could not send (ErrClientClosing, ErrServerClosing and ErrRejected of its
// internal jsonrpc2 package).
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
	codeRejected      = -32005
)

// answer returns the error the server answered a request with, if err holds one (and
// not one the SDK made up).
func answer(err error) *jsonrpc.Error {
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) {
		return nil
	}
	switch rpc.Code {
	case codeClientClosing, codeServerClosing, codeRejected:
		return nil
	}
	return rpc
}

// check says why arguments may not go to the server, if they may not.
func (t *Tool) check(arguments string) error {
	if len(arguments) > maxRawArgumentLen {
		return fmt.Errorf("the arguments have %d bytes, more than %d", len(arguments), maxRawArgumentLen)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(arguments), &obj); err != nil || obj == nil {
		return errors.New(`the arguments must be a JSON object, such as {"name": "value"}`)
	}
	if t.validator != nil {
		if err := t.validator.Validate(arguments); err != nil {
			return fmt.Errorf("the arguments do not fit the tool's input schema: %v", err)
		}
	}
	return nil
}

// resultText is what the model reads of a result: its text, a note for each content it
// is not shown (an image, audio, binary data), the structured content when there is
// nothing else, all cut at max bytes.
func resultText(res *sdk.CallToolResult, max int) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[an image (%s, %d bytes) is not shown: talkgraph passes only text to the model]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio (%s, %d bytes) is not played: talkgraph passes only text to the model]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[a resource: %s %s]", c.URI, c.Name))
		case *sdk.EmbeddedResource:
			switch r := c.Resource; {
			case r == nil:
			case r.Blob != nil:
				parts = append(parts, fmt.Sprintf("[the resource %s (%s, %d bytes) is not shown: talkgraph passes only text to the model]", r.URI, r.MIMEType, len(r.Blob)))
			default:
				parts = append(parts, r.Text)
			}
		default:
			parts = append(parts, "[a content talkgraph does not pass on]")
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	text := strings.Join(parts, "\n")
	if text == "" {
		return "(no output)"
	}
	if len(text) > max {
		return cut(text, max) + fmt.Sprintf("\n[the result was cut at %d bytes]", max)
	}
	return strings.ToValidUTF8(text, "\uFFFD")
}

// cut returns s cut to at most n bytes, on a character's boundary, as valid UTF-8.
func cut(s string, n int) string {
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s[max(0, len(s)-utf8.UTFMax):]) {
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// progress is a call's progress: notifications with its token are written to out, up to
// the result's limit.
type progress struct {
	token string
	out   Output

	mu      sync.Mutex
	written int
	cut     bool
}

// progressLine is what a progress notification prints.
func progressLine(p *sdk.ProgressNotificationParams) string {
	var b bytes.Buffer
	switch {
	case p.Message != "":
		b.WriteString(p.Message)
	case p.Total > 0:
		fmt.Fprintf(&b, "%g/%g", p.Progress, p.Total)
	default:
		fmt.Fprintf(&b, "%g", p.Progress)
	}
	return strings.ToValidUTF8(strings.ReplaceAll(b.String(), "\n", " "), "\uFFFD") + "\n"
}
