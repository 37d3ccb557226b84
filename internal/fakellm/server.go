// Package fakellm is a fake OpenAI-compatible chat-completions server for tests. It speaks
// the exact server-sent events wire format of streamed chat completions, answers each
// request from a script, and records what it received, so that a test can say both what
// the model replied and what the model was sent.
package fakellm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Path is where the server expects every request.
const Path = "/v1/chat/completions"

// Server is an OpenAI-compatible chat-completions endpoint: its URL plus "/v1" is a base
// URL for a client. Request i is answered by the i-th handler of its script; every request
// is recorded.
type Server struct {
	*httptest.Server
	t    testing.TB
	quit chan struct{}

	mu         sync.Mutex
	script     []http.HandlerFunc
	pastScript http.HandlerFunc
	reqs       []*Request
}

// Request is one request as the server received it.
type Request struct {
	At     time.Time
	Path   string
	Header http.Header
	Raw    string // the body as sent
	Body   ChatRequest
	// Done is closed when the request's context ends on the server's side: the client hung
	// up, or the handler returned.
	Done <-chan struct{}
}

// New starts a server that answers its requests with script, one handler a request, and
// closes it when the test ends. A request that is not a POST to [Path], or whose body does
// not decode, fails the test. So does a request past the script: it is answered by
// [UnscriptedBadRequest] unless [Server.PastScript] says otherwise.
func New(t testing.TB, script ...http.HandlerFunc) *Server {
	t.Helper()
	s := &Server{t: t, quit: make(chan struct{}), script: script, pastScript: UnscriptedBadRequest}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.quit) }) // runs first: releases held streams
	return s
}

// UnscriptedBadRequest answers a request past the script with a 400, an error a client
// does not retry: the unexpected request shows once.
var UnscriptedBadRequest = ErrorReply(http.StatusBadRequest, `{"error":{"message":"no scripted reply"}}`)

// UnscriptedServerError answers a request past the script with a 500, an error a client
// retries.
var UnscriptedServerError = ErrorReply(http.StatusInternalServerError, `{"error":{"message":"no more scripted replies"}}`)

// PastScript sets how s answers requests past its script, such as
// [UnscriptedServerError]; they fail the test whatever the answer. It returns s.
func (s *Server) PastScript(h http.HandlerFunc) *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pastScript = h
	return s
}

// Add appends handlers to the script: for handlers that need the server, such as its
// [Server.Quit] channel.
func (s *Server) Add(script ...http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, script...)
}

// Quit is closed when the test ends, before the server closes: a handler that holds a
// stream open gives up on it.
func (s *Server) Quit() <-chan struct{} { return s.quit }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw)) // handlers may read it too
	done := make(chan struct{})
	rec := &Request{At: time.Now(), Path: r.URL.Path, Header: r.Header.Clone(), Raw: string(raw), Done: done}
	if err := json.Unmarshal(raw, &rec.Body); err != nil {
		s.t.Errorf("request body does not decode: %v\n%s", err, raw)
	}
	go func() {
		<-r.Context().Done()
		close(done)
	}()

	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, rec)
	h, scripted := s.pastScript, n < len(s.script)
	if scripted {
		h = s.script[n]
	}
	s.mu.Unlock()

	if r.Method != http.MethodPost || r.URL.Path != Path {
		s.t.Errorf("request #%d: %s %s, want POST %s", n+1, r.Method, r.URL.Path, Path)
	}
	if !scripted {
		s.t.Errorf("unexpected request #%d:\n%s", n+1, strings.Join(rec.Transcript(), "\n"))
	}
	h(w, r)
}

// Requests returns what the server received so far.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Request returns the i-th request (from 0), failing the test when there is none yet.
func (s *Server) Request(i int) *Request {
	s.t.Helper()
	reqs := s.Requests()
	if i >= len(reqs) {
		s.t.Fatalf("server received %d requests, want at least %d", len(reqs), i+1)
	}
	return reqs[i]
}

// Transcript shows the request's messages as transcript lines, see [Message.String].
func (r *Request) Transcript() []string {
	out := make([]string, len(r.Body.Messages))
	for i, m := range r.Body.Messages {
		out[i] = m.String()
	}
	return out
}

// ToolNames returns the names of the tools the request offers, in order.
func (r *Request) ToolNames() []string {
	var out []string
	for _, t := range r.Body.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

// ChatRequest is the body of a chat-completions request.
type ChatRequest struct {
	Model       string    `json:"model"`
	Temperature *float64  `json:"temperature"`
	Stream      bool      `json:"stream"`
	Messages    []Message `json:"messages"`
	Tools       []Tool    `json:"tools"`
}

// Tool is a tool a request offers.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// Message is one message of a request.
type Message struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	ToolCallID string     `json:"tool_call_id"`
	ToolCalls  []ToolCall `json:"tool_calls"`
}

// ToolCall is a tool call of an assistant message.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Content is a message's content as it was sent: a string, an array of content parts, or
// neither when it was absent or null.
type Content struct {
	Text  *string       // sent as a string
	Parts []ContentPart // sent as an array of parts
}

// ContentPart is one part of a content array.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// UnmarshalJSON decodes a string, an array of parts or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	*c = Content{}
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '[':
		return json.Unmarshal(b, &c.Parts)
	}
	return json.Unmarshal(b, &c.Text)
}

// Text is the message's content as plain text: the string, or the text of its parts.
func (m Message) Text() string {
	if m.Content.Text != nil {
		return *m.Content.Text
	}
	var b strings.Builder
	for _, p := range m.Content.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// String shows a message as a transcript line: "user: hi",
// "assistant: Hello [call_1 get_weather {…}]", "tool call_1: Rome". Content sent as a
// string shows after a space even when empty ("assistant: "); content sent as parts shows
// as a list of quoted texts (`user: ["Hel" "lo"]`), so that a transcript tells each form
// from the others.
func (m Message) String() string {
	var b strings.Builder
	b.WriteString(m.Role)
	if m.ToolCallID != "" {
		b.WriteString(" " + m.ToolCallID)
	}
	b.WriteString(":")
	switch {
	case m.Content.Text != nil:
		b.WriteString(" " + *m.Content.Text)
	case m.Content.Parts != nil:
		b.WriteString(" [")
		for i, p := range m.Content.Parts {
			if i > 0 {
				b.WriteString(" ")
			}
			if p.Type == "text" {
				fmt.Fprintf(&b, "%q", p.Text)
			} else {
				b.WriteString("<" + p.Type + ">")
			}
		}
		b.WriteString("]")
	}
	for _, c := range m.ToolCalls {
		fmt.Fprintf(&b, " [%s %s %s]", c.ID, c.Function.Name, c.Function.Arguments)
	}
	return b.String()
}
