// Package tgtest holds test clients for talkgraph's API: GraphQL over HTTP, the two
// websocket subprotocols and server-sent events, spoken over real connections. Tests of the
// server and of the crash behaviour share them.
package tgtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Wait is how long tests wait for an event before failing.
const Wait = 15 * time.Second

// Client talks to one server as one user.
type Client struct {
	T     testing.TB
	Base  string // http://host:port
	Token string
	HTTP  *http.Client
}

// Guest signs in as a new guest user.
func Guest(t testing.TB, base string) *Client {
	t.Helper()
	resp, err := http.Post(base+"/auth/guest", "application/json", nil)
	if err != nil {
		t.Fatalf("guest sign-in: %v", err)
	}
	defer resp.Body.Close()
	var out struct{ Token, UserID string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		t.Fatalf("guest sign-in: status %d, %v", resp.StatusCode, err)
	}
	return &Client{T: t, Base: base, Token: out.Token, HTTP: &http.Client{Timeout: Wait}}
}

// GQLError is one error of a GraphQL response.
type GQLError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Code returns extensions.code.
func (e GQLError) Code() string { s, _ := e.Extensions["code"].(string); return s }

// Response is a GraphQL response.
type Response struct {
	Status int
	Data   json.RawMessage `json:"data"`
	Errors []GQLError      `json:"errors"`
}

// Code returns the code of the first error, or "".
func (r *Response) Code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	return r.Errors[0].Code()
}

// Do posts a GraphQL operation and returns the response, failing the test only when the
// request cannot be made.
func (c *Client) Do(query string, vars map[string]any) *Response {
	c.T.Helper()
	out, err := c.Try(query, vars)
	if err != nil {
		c.T.Fatal(err)
	}
	return out
}

// Try posts a GraphQL operation and returns the response, or an error when the request
// cannot be made or its answer is not GraphQL (a server going away, say). It is safe to
// call from any goroutine.
func (c *Client) Try(query string, vars map[string]any) (*Response, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", c.Base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /query: %w", err)
	}
	defer resp.Body.Close()
	out := &Response{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, fmt.Errorf("POST /query: status %d, decoding: %w", resp.StatusCode, err)
	}
	return out, nil
}

// On returns a client for the same user on another server (a replica of the same
// deployment) at base.
func (c *Client) On(base string) *Client {
	cp := *c
	cp.Base = base
	return &cp
}

// Must posts an operation, fails the test on any error, and decodes data into out.
func (c *Client) Must(query string, vars map[string]any, out any) {
	c.T.Helper()
	r := c.Do(query, vars)
	if len(r.Errors) > 0 {
		c.T.Fatalf("operation failed: %+v\nquery: %s", r.Errors, query)
	}
	if out != nil {
		if err := json.Unmarshal(r.Data, out); err != nil {
			c.T.Fatalf("decoding data %s: %v", r.Data, err)
		}
	}
}

// CreateSession creates a session with optional settings and returns its ID.
func (c *Client) CreateSession(settings map[string]any) string {
	c.T.Helper()
	var out struct{ CreateTalkSession struct{ ID string } }
	input := map[string]any{"title": "test"}
	if settings != nil {
		input["settings"] = settings
	}
	c.Must(`mutation($i: CreateTalkSessionInput){ createTalkSession(input: $i){ id } }`, map[string]any{"i": input}, &out)
	return out.CreateTalkSession.ID
}

// Send adds a message and returns the message and run IDs.
func (c *Client) Send(sessionID, content string) (msgID, runID string) {
	c.T.Helper()
	var out struct {
		AddMessage struct {
			Message struct{ ID string }
			Run     struct{ ID string }
		}
	}
	c.Must(`mutation($s: ID!, $c: String!){ addMessage(input: {sessionId: $s, content: $c}){ message { id } run { id } } }`,
		map[string]any{"s": sessionID, "c": content}, &out)
	return out.AddMessage.Message.ID, out.AddMessage.Run.ID
}

// Message is a message as the API shows it.
type Message struct {
	ID, Role, Kind, Content, Status, RunID string
	Error                                  string // the failure reason of a FAILED message (in MessageCompleted)
	ParentID                               string
	SiblingIDs                             []string `json:"siblingIds"`
}

// Messages returns the session's whole history, oldest first, page by page.
func (c *Client) Messages(sessionID string) []Message {
	c.T.Helper()
	var msgs []Message
	vars := map[string]any{"s": sessionID}
	for {
		var out struct {
			Session struct {
				Messages struct {
					Edges    []struct{ Node Message }
					PageInfo struct {
						HasNextPage bool
						EndCursor   string
					}
				}
			}
		}
		c.Must(`query($s: ID!, $a: String){ session(id: $s){ messages(first: 100, after: $a){
			edges { node { id role kind content status runId parentId siblingIds } } pageInfo { hasNextPage endCursor } } } }`, vars, &out)
		for _, e := range out.Session.Messages.Edges {
			msgs = append(msgs, e.Node)
		}
		if !out.Session.Messages.PageInfo.HasNextPage {
			return msgs
		}
		vars["a"] = out.Session.Messages.PageInfo.EndCursor
	}
}

// StreamQuery selects every event type with all the fields tests look at.
const StreamQuery = `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
  __typename cursor at
  ... on MessageAdded { message { id role kind content status runId parentId } }
  ... on BranchSelected { leafId }
  ... on MessageChunk { messageId delta offset }
  ... on MessageCompleted { message { id role kind content status runId error } }
  ... on RunStatusChanged { run { id status error } }
  ... on QuestionAsked { question { id prompt runId choices multiple answerSchema expiresAt } }
  ... on QuestionAnswered { question { id answer } }
  ... on QuestionWithdrawn { question { id withdrawn withdrawnReason } }
  ... on ToolCallStarted { toolCall { id name arguments status } }
  ... on ToolCallOutput { toolCallId delta offset }
  ... on ToolCallFinished { toolCall { id status output result error approval { decision reason } } }
  ... on ToolApprovalRequested { toolCall { id name arguments status approval { requestedArguments expiresAt } } }
  ... on ToolApprovalDecided { toolCall { id name arguments status approval { requestedArguments decision reason decidedAt } } }
} }`

// Event is one messageStream event, flattened.
type Event struct {
	Typename   string `json:"__typename"`
	Cursor     string
	MessageID  string
	Delta      string
	Offset     int
	ToolCallID string
	LeafID     string
	Message    *Message
	Run        *struct{ ID, Status, Error string }
	Question   *Question
	ToolCall   *ToolCall
}

// Question is a question as the stream shows it.
type Question struct {
	ID, Prompt, RunID, Answer, AnswerSchema, ExpiresAt, WithdrawnReason string
	Choices                                                             []string
	Multiple, Withdrawn                                                 bool
}

// ToolCall is a tool call as the stream shows it.
type ToolCall struct {
	ID, Name, Arguments, Status, Output, Result, Error string
	Approval                                           *struct {
		RequestedArguments, Decision, Reason, DecidedAt, ExpiresAt string
	}
}

// Socket is a websocket connection speaking graphql-transport-ws or the legacy
// graphql-ws.
type Socket struct {
	t      testing.TB
	Conn   *websocket.Conn
	legacy bool

	wmu    sync.Mutex
	mu     sync.Mutex
	subs   map[string]chan Frame
	nextID int
	// Closed receives the close error once the connection ends.
	Closed chan error
}

// Frame is one message for a subscription: data, an error, or completion.
type Frame struct {
	Data     json.RawMessage
	Errors   []GQLError
	Complete bool
}

// Dial opens a websocket to base with the given subprotocol ("graphql-transport-ws" or
// "graphql-ws") and sends connection_init with the payload. It does not wait for the ack.
func Dial(t testing.TB, base, protocol string, initPayload map[string]any) (*Socket, error) {
	d := websocket.Dialer{Subprotocols: []string{protocol}, HandshakeTimeout: Wait}
	url := "ws" + strings.TrimPrefix(base, "http") + "/query"
	conn, _, err := d.Dial(url, nil)
	if err != nil {
		return nil, err
	}
	s := &Socket{t: t, Conn: conn, legacy: protocol == "graphql-ws", subs: map[string]chan Frame{}, Closed: make(chan error, 1)}
	if err := s.write(map[string]any{"type": "connection_init", "payload": initPayload}); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// Connect dials with the client's token (none for a client without one: connection_init
// then carries no Authorization) and waits for connection_ack.
func (c *Client) Connect(protocol string) *Socket {
	c.T.Helper()
	payload := map[string]any{}
	if c.Token != "" {
		payload["Authorization"] = "Bearer " + c.Token
	}
	s, err := Dial(c.T, c.Base, protocol, payload)
	if err != nil {
		c.T.Fatalf("dial websocket: %v", err)
	}
	_ = s.Conn.SetReadDeadline(time.Now().Add(Wait))
	for {
		var m struct{ Type string }
		if err := s.Conn.ReadJSON(&m); err != nil {
			c.T.Fatalf("waiting for connection_ack: %v", err)
		}
		if m.Type == "connection_ack" {
			break
		}
		if m.Type != "ka" && m.Type != "ping" {
			c.T.Fatalf("waiting for connection_ack, got %q", m.Type)
		}
	}
	_ = s.Conn.SetReadDeadline(time.Time{})
	go s.readLoop()
	c.T.Cleanup(func() { s.Close() })
	return s
}

func (s *Socket) write(v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.Conn.WriteJSON(v)
}

func (s *Socket) readLoop() {
	defer func() {
		s.mu.Lock()
		for id, ch := range s.subs {
			close(ch)
			delete(s.subs, id)
		}
		s.mu.Unlock()
	}()
	for {
		var m struct {
			Type    string          `json:"type"`
			ID      string          `json:"id"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := s.Conn.ReadJSON(&m); err != nil {
			s.Closed <- err
			return
		}
		switch m.Type {
		case "ping":
			_ = s.write(map[string]any{"type": "pong"})
			continue
		case "ka", "pong":
			continue
		}
		s.mu.Lock()
		ch := s.subs[m.ID]
		s.mu.Unlock()
		if ch == nil {
			continue
		}
		var f Frame
		switch m.Type {
		case "next", "data":
			var p struct {
				Data   json.RawMessage
				Errors []GQLError
			}
			_ = json.Unmarshal(m.Payload, &p)
			f.Data, f.Errors = p.Data, p.Errors
		case "error":
			var errs []GQLError
			if json.Unmarshal(m.Payload, &errs) != nil {
				var one GQLError
				_ = json.Unmarshal(m.Payload, &one)
				errs = []GQLError{one}
			}
			f.Errors = errs
			f.Complete = true
		case "complete":
			f.Complete = true
		}
		ch <- f
		if f.Complete {
			s.mu.Lock()
			if s.subs[m.ID] == ch {
				close(ch)
				delete(s.subs, m.ID)
			}
			s.mu.Unlock()
		}
	}
}

// Subscribe starts an operation and returns its ID and frames. The channel is buffered
// generously so the read loop never waits on a test.
func (s *Socket) Subscribe(query string, vars map[string]any) (string, <-chan Frame) {
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprint(s.nextID)
	ch := make(chan Frame, 100000)
	s.subs[id] = ch
	s.mu.Unlock()
	typ := "subscribe"
	if s.legacy {
		typ = "start"
	}
	if err := s.write(map[string]any{"type": typ, "id": id, "payload": map[string]any{"query": query, "variables": vars}}); err != nil {
		s.t.Errorf("subscribe: %v", err)
	}
	return id, ch
}

// Stop ends a subscription.
func (s *Socket) Stop(id string) {
	typ := "complete"
	if s.legacy {
		typ = "stop"
	}
	_ = s.write(map[string]any{"type": typ, "id": id})
}

// Close closes the connection.
func (s *Socket) Close() {
	s.wmu.Lock()
	_ = s.Conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	s.wmu.Unlock()
	_ = s.Conn.Close()
}

// Stream subscribes to a session's messageStream.
func (s *Socket) Stream(sessionID, after string) (string, *Events) {
	vars := map[string]any{"s": sessionID}
	if after != "" {
		vars["a"] = after
	}
	id, ch := s.Subscribe(StreamQuery, vars)
	return id, &Events{t: s.t, frames: ch}
}

// Events reads a messageStream.
type Events struct {
	t      testing.TB
	frames <-chan Frame
	All    []Event
	Err    []GQLError
	Done   bool
}

// NewEvents reads the frames of a subscription whose root field is messageStream, or is
// aliased so (messageStream: sharedStream(…)).
func NewEvents(t testing.TB, frames <-chan Frame) *Events { return &Events{t: t, frames: frames} }

// Next returns the next event, failing the test after Wait.
func (e *Events) Next() Event {
	e.t.Helper()
	ev, ok := e.TryNext(Wait)
	if !ok {
		e.t.Fatalf("no event within %v (stream done: %v, errors: %+v; seen %d events)", Wait, e.Done, e.Err, len(e.All))
	}
	return ev
}

// TryNext returns the next event, or false when none came within d or the stream ended.
func (e *Events) TryNext(d time.Duration) (Event, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case f, ok := <-e.frames:
			if !ok || f.Complete {
				e.Done = true
				e.Err = append(e.Err, f.Errors...)
				if !ok || len(f.Errors) > 0 || f.Complete {
					return Event{}, false
				}
			}
			if len(f.Errors) > 0 {
				e.Err = append(e.Err, f.Errors...)
				return Event{}, false
			}
			var wrap struct{ MessageStream Event }
			if err := json.Unmarshal(f.Data, &wrap); err != nil {
				e.t.Fatalf("decoding event %s: %v", f.Data, err)
			}
			e.All = append(e.All, wrap.MessageStream)
			return wrap.MessageStream, true
		case <-timer.C:
			return Event{}, false
		}
	}
}

// Until reads events until one satisfies match, and returns it.
func (e *Events) Until(what string, match func(Event) bool) Event {
	e.t.Helper()
	deadline := time.Now().Add(Wait)
	for {
		left := time.Until(deadline)
		ev, ok := e.TryNext(left)
		if !ok {
			e.t.Fatalf("waiting for %s: none within %v (done %v, errors %+v, %d events seen)", what, Wait, e.Done, e.Err, len(e.All))
		}
		if match(ev) {
			return ev
		}
	}
}

// RunEnds matches the RunStatusChanged event of run id reaching a final status.
func RunEnds(id string) func(Event) bool {
	return func(ev Event) bool {
		if ev.Typename != "RunStatusChanged" || ev.Run.ID != id {
			return false
		}
		switch ev.Run.Status {
		case "COMPLETED", "CANCELLED", "INTERRUPTED", "FAILED":
			return true
		}
		return false
	}
}

// Text assembles each message's text from the chunk events seen, placing every delta at
// its offset as a careful client does.
func Text(evs []Event) map[string]string {
	out := map[string][]rune{}
	for _, ev := range evs {
		if ev.Typename != "MessageChunk" {
			continue
		}
		cur := out[ev.MessageID]
		if ev.Offset > len(cur) {
			cur = append(cur, []rune(strings.Repeat("\x00", ev.Offset-len(cur)))...)
		}
		out[ev.MessageID] = append(cur[:ev.Offset], []rune(ev.Delta)...)
	}
	res := map[string]string{}
	for k, v := range out {
		res[k] = string(v)
	}
	return res
}

// SSE subscribes over server-sent events and returns the events as they come.
func (c *Client) SSE(ctx context.Context, query string, vars map[string]any) (<-chan json.RawMessage, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequestWithContext(ctx, "POST", c.Base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, fmt.Errorf("SSE: status %d", resp.StatusCode)
	}
	out := make(chan json.RawMessage, 1000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(line[6:])
			case strings.HasPrefix(line, "data:") && event == "next":
				out <- json.RawMessage(strings.TrimSpace(line[5:]))
			case strings.HasPrefix(line, "event:") && event == "complete":
				return
			}
		}
	}()
	return out, nil
}

// Cursor returns the session's streamCursor: subscribing after it misses nothing that
// happens from now on.
func (c *Client) Cursor(sessionID string) string {
	c.T.Helper()
	var out struct{ Session struct{ StreamCursor string } }
	c.Must(`query($s: ID!){ session(id: $s){ streamCursor } }`, map[string]any{"s": sessionID}, &out)
	return out.Session.StreamCursor
}

// Run is a run as cancelRun answers it.
type Run struct{ ID, Status string }

// Cancel presses stop in the session and returns the stopped run, or nil when nothing ran.
func (c *Client) Cancel(sessionID string) *Run {
	c.T.Helper()
	var out struct{ CancelRun *Run }
	c.Must(`mutation($s: ID!){ cancelRun(sessionId: $s){ id status } }`, map[string]any{"s": sessionID}, &out)
	return out.CancelRun
}

// SSEEvent is one server-sent event as the server framed it: its name ("next",
// "complete"), its id ("" when it has none) and its data (empty for complete).
type SSEEvent struct {
	Event string
	ID    string
	Data  json.RawMessage
}

// SSEStream subscribes over server-sent events and returns every event, complete included,
// in order; the channel is closed when the stream ends, however it ends. Comment lines
// (keep-alives) are skipped.
func (c *Client) SSEStream(ctx context.Context, query string, vars map[string]any) (<-chan SSEEvent, error) {
	return c.SSEResume(ctx, query, vars, "")
}

// SSEResume is SSEStream as a browser's EventSource reconnects: the same request, with a
// Last-Event-ID header when lastEventID is not empty (the id of the last event received).
func (c *Client) SSEResume(ctx context.Context, query string, vars map[string]any, lastEventID string) (<-chan SSEEvent, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequestWithContext(ctx, "POST", c.Base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, fmt.Errorf("SSE: status %d: %s", resp.StatusCode, b)
	}
	out := make(chan SSEEvent, 100000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		var ev SSEEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Event != "" || len(data) > 0 {
					if ev.Event == "" {
						ev.Event = "message"
					}
					ev.Data = json.RawMessage(strings.Join(data, "\n"))
					out <- ev
				}
				ev, data = SSEEvent{}, nil
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event:"):
				ev.Event = strings.TrimSpace(line[len("event:"):])
			case strings.HasPrefix(line, "id:"):
				ev.ID = strings.TrimPrefix(line[len("id:"):], " ")
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(line[len("data:"):], " "))
			}
		}
	}()
	return out, nil
}
