package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/gorilla/websocket"
)

// client talks to one talkgraph deployment: sign-in, GraphQL mutations over HTTP, and
// websocket subscriptions. It is shared by all sessions; each simulated user sends its
// operations on HTTP connections of its own (forUser), as a browser would.
type client struct {
	base    string // the server's URL, without a trailing slash
	wsURL   string // its /query as ws:// or wss://
	http    *http.Client
	tr      *http.Transport
	dialer  *websocket.Dialer
	timeout time.Duration

	// With secret set, tokens are minted here instead of asking /auth/guest.
	secret           []byte
	issuer, audience string
}

// newClient prepares a client for the server at base. maxConns sizes the pool of idle
// HTTP connections kept for reuse.
func newClient(base string, timeout time.Duration, maxConns int) (*client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad -url %q: want e.g. http://localhost:8080", base)
	}
	ws := *u
	switch u.Scheme {
	case "http":
		ws.Scheme = "ws"
	case "https":
		ws.Scheme = "wss"
	default:
		return nil, fmt.Errorf("bad -url %q: the scheme must be http or https", base)
	}
	ws.Path = strings.TrimRight(u.Path, "/") + "/query"
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0 // no limit overall; per host below
	tr.MaxIdleConnsPerHost = max(maxConns, 64)
	tr.IdleConnTimeout = 90 * time.Second
	tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &client{
		base:    u.String(),
		wsURL:   ws.String(),
		http:    &http.Client{Transport: tr, Timeout: timeout},
		tr:      tr,
		timeout: timeout,
		dialer: &websocket.Dialer{
			Proxy:            http.ProxyFromEnvironment,
			HandshakeTimeout: timeout,
			Subprotocols:     []string{"graphql-transport-ws"},
			// Small buffers and pooled write buffers: thousands of connections mostly idle.
			ReadBufferSize:  2048,
			WriteBufferSize: 1024,
			WriteBufferPool: &sync.Pool{},
		},
	}, nil
}

// token returns a token for a new random user: minted with the server's secret when
// given, else from POST /auth/guest.
func (c *client) token(ctx context.Context) (string, error) {
	if len(c.secret) > 0 {
		return mintToken(c.secret, uuid.NewString(), c.issuer, c.audience, time.Now(), 24*time.Hour)
	}
	for attempt := 0; ; attempt++ {
		tok, retryAfter, err := c.guest(ctx)
		if err == nil || retryAfter == 0 {
			return tok, err
		}
		// Rate-limited: wait as asked and try again, until the context ends.
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("%w (gave up after %d tries: %v)", err, attempt+1, ctx.Err())
		case <-t.C:
		}
	}
}

// mintToken signs an HS256 token for user as the server does: sub, iat, exp, and iss and
// aud when set.
func mintToken(secret []byte, user, issuer, audience string, now time.Time, ttl time.Duration) (string, error) {
	claims := jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		Issuer:    issuer,
	}
	if audience != "" {
		claims.Audience = jwt.ClaimStrings{audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// guest asks POST /auth/guest for a token. retryAfter is set when the server said to
// come back later (HTTP 429 or 503).
func (c *client) guest(ctx context.Context) (tok string, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/auth/guest", nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("guest sign-in: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		wait := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return "", wait, fmt.Errorf("guest sign-in: HTTP %s", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("guest sign-in: HTTP %s: %s (with the server's AUTH_SECRET, -auth-secret mints tokens instead)", resp.Status, clip(string(body), 200))
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		return "", 0, fmt.Errorf("guest sign-in: no token in %q", clip(string(body), 200))
	}
	return out.Token, 0, nil
}

// gqlError is an error the GraphQL API answered, with its extensions.code.
type gqlError struct {
	Code    string
	Message string
}

func (e *gqlError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// forUser returns an HTTP client with a connection pool of its own, for one simulated
// user: a burst of many users' operations then arrives on connections they opened
// earlier (as from many browsers), not on a storm of new ones.
func (c *client) forUser() *http.Client {
	tr := c.tr.Clone()
	tr.MaxIdleConnsPerHost = 2
	return &http.Client{Transport: tr, Timeout: c.timeout}
}

// graphql posts one operation with the user's token on hc and decodes its data into out.
func (c *client) graphql(ctx context.Context, hc *http.Client, token, query string, vars map[string]any, out any) error {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/query", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	var r struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("HTTP %s: %s", resp.Status, clip(string(data), 200))
	}
	if len(r.Errors) > 0 {
		return &gqlError{Code: r.Errors[0].Extensions.Code, Message: r.Errors[0].Message}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	if out != nil {
		return json.Unmarshal(r.Data, out)
	}
	return nil
}

// createSession creates a session with the agent and answers its ID and stream cursor.
func (c *client) createSession(ctx context.Context, hc *http.Client, token, title, agent string) (id, cursor string, err error) {
	var out struct {
		S struct {
			ID           string `json:"id"`
			StreamCursor string `json:"streamCursor"`
		} `json:"createTalkSession"`
	}
	err = c.graphql(ctx, hc, token,
		`mutation($t: String, $a: String) { createTalkSession(input: {title: $t, settings: {agent: $a, busyPolicy: INTERRUPT}}) { id streamCursor } }`,
		map[string]any{"t": title, "a": agent}, &out)
	if err == nil && out.S.ID == "" {
		err = errors.New("createTalkSession answered no id")
	}
	return out.S.ID, out.S.StreamCursor, err
}

// addMessage sends a user message and answers the ID and status of the run it started.
func (c *client) addMessage(ctx context.Context, hc *http.Client, token, sessionID, content string) (runID, status string, err error) {
	var out struct {
		P struct {
			Run struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"run"`
		} `json:"addMessage"`
	}
	err = c.graphql(ctx, hc, token,
		`mutation($s: ID!, $c: String!, $k: String) { addMessage(input: {sessionId: $s, content: $c, idempotencyKey: $k}) { message { id } run { id status } } }`,
		map[string]any{"s": sessionID, "c": content, "k": uuid.NewString()}, &out)
	return out.P.Run.ID, out.P.Run.Status, err
}

// approve approves a tool call (decideToolCall with APPROVE, its arguments as asked).
func (c *client) approve(ctx context.Context, hc *http.Client, token, callID string) error {
	var out struct {
		D struct {
			ToolCall struct {
				Status string `json:"status"`
			} `json:"toolCall"`
		} `json:"decideToolCall"`
	}
	err := c.graphql(ctx, hc, token, `mutation($c: ID!) { decideToolCall(input: {toolCallId: $c, decision: APPROVE}) { toolCall { status } } }`,
		map[string]any{"c": callID}, &out)
	if err == nil && out.D.ToolCall.Status != "RUNNING" && out.D.ToolCall.Status != "COMPLETED" {
		err = fmt.Errorf("decideToolCall answered the call %s", out.D.ToolCall.Status)
	}
	return err
}

// cancelRun presses the stop button; status is empty when the server answered null
// (nothing was running).
func (c *client) cancelRun(ctx context.Context, hc *http.Client, token, sessionID string) (runID, status string, err error) {
	var out struct {
		Run *struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"cancelRun"`
	}
	err = c.graphql(ctx, hc, token, `mutation($s: ID!) { cancelRun(sessionId: $s) { id status } }`,
		map[string]any{"s": sessionID}, &out)
	if err != nil || out.Run == nil {
		return "", "", err
	}
	return out.Run.ID, out.Run.Status, nil
}

// wsConn is one websocket with one messageStream subscription (ID "1") for one session.
// A single goroutine reads its frames; writes are serialised by wmu.
type wsConn struct {
	c       *websocket.Conn
	s       *session
	wmu     sync.Mutex
	acked   chan struct{}
	done    chan struct{} // closed when the reader stops
	closing atomic.Bool   // the client is closing: what follows is no error
	buf     bytes.Buffer
}

var (
	pongFrame = []byte(`{"type":"pong"}`)
)

// frame is a graphql-transport-ws message. Payload is decoded as a next payload at
// once, which saves a second pass over the bytes for the frames that matter; other
// frames' payloads fail that decoding, which is then ignored.
type frame struct {
	Type    string      `json:"type"`
	ID      string      `json:"id"`
	Payload nextPayload `json:"payload"`
}

type nextPayload struct {
	Data *struct {
		MessageStream *streamEvent `json:"messageStream"`
	} `json:"data"`
	Errors []struct {
		Message string `json:"message"`
	} `json:"errors"`
}

// subscribe opens a websocket for s with its token, waits for connection_ack and
// subscribes to the session's stream after its cursor. The reader goroutine runs until
// close or until the connection breaks.
func (c *client) subscribe(ctx context.Context, s *session) (*wsConn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, resp, err := c.dialer.DialContext(ctx, c.wsURL, nil)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
			return nil, fmt.Errorf("websocket: %w (HTTP %s: every user comes from this address; raise the server's per-address limits, see docs/PERFORMANCE.md)", err, resp.Status)
		}
		if resp != nil {
			return nil, fmt.Errorf("websocket: %w (HTTP %s)", err, resp.Status)
		}
		return nil, fmt.Errorf("websocket: %w", err)
	}
	if conn.Subprotocol() != "graphql-transport-ws" {
		conn.Close()
		return nil, fmt.Errorf("websocket: the server chose subprotocol %q, not graphql-transport-ws", conn.Subprotocol())
	}
	w := &wsConn{c: conn, s: s, acked: make(chan struct{}), done: make(chan struct{})}
	go w.readLoop()
	init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + s.token}})
	if err := w.write(init); err != nil {
		w.abort()
		return nil, fmt.Errorf("connection_init: %w", err)
	}
	select {
	case <-w.acked:
	case <-w.done:
		return nil, errors.New("the connection ended before connection_ack")
	case <-ctx.Done():
		w.abort()
		return nil, fmt.Errorf("no connection_ack: %w", ctx.Err())
	}
	vars := map[string]any{"s": s.id}
	if s.cursor != "" {
		vars["a"] = s.cursor
	}
	query := s.query
	if query == "" {
		query = subscriptionQuery
	}
	sub, _ := json.Marshal(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": query, "variables": vars}})
	if err := w.write(sub); err != nil {
		w.abort()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return w, nil
}

// write sends one text frame.
func (w *wsConn) write(b []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return w.c.WriteMessage(websocket.TextMessage, b)
}

// readLoop reads frames until the connection ends. There is no read deadline: a slow
// server is measured, not cut off (the scenario's deadlines catch one that hangs).
// Websocket ping control frames are answered by gorilla's default handler while it reads;
// graphql-transport-ws pings are answered here.
func (w *wsConn) readLoop() {
	defer close(w.done)
	acked := false
	for {
		_, r, err := w.c.NextReader()
		if err == nil {
			w.buf.Reset()
			_, err = w.buf.ReadFrom(r)
		}
		at := time.Now()
		if err != nil {
			if w.closing.Load() {
				return
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				w.s.onBroken(fmt.Sprintf("unexpected close %d", ce.Code), fmt.Sprintf("close %d %q", ce.Code, ce.Text))
			} else {
				w.s.onBroken("unexpected close (read error)", err.Error())
			}
			w.abort()
			return
		}
		var f frame
		err = json.Unmarshal(w.buf.Bytes(), &f)
		var typeErr *json.UnmarshalTypeError
		if err != nil && (f.Type == "next" || !errors.As(err, &typeErr)) {
			w.s.onBroken("bad frame", fmt.Sprintf("%v: %s", err, clip(w.buf.String(), 200)))
			continue
		}
		switch f.Type {
		case "next":
			p := f.Payload
			if len(p.Errors) > 0 {
				w.s.onBroken("error in next payload", p.Errors[0].Message)
				continue
			}
			if p.Data != nil && p.Data.MessageStream != nil {
				w.s.onEvent(p.Data.MessageStream, at)
			}
		case "ping":
			if err := w.write(pongFrame); err != nil && !w.closing.Load() {
				w.s.onBroken("pong failed", err.Error())
			}
		case "pong":
		case "connection_ack":
			if !acked {
				acked = true
				close(w.acked)
			}
		case "complete":
			if !w.closing.Load() {
				w.s.onBroken("subscription ended early", "complete frame for subscription "+f.ID)
			}
		case "error":
			w.s.onBroken("error frame", clip(w.buf.String(), 300))
		default:
			w.s.onBroken("unexpected frame", clip(w.buf.String(), 200))
		}
	}
}

// close ends the connection as a browser tab would: a close frame (1000), then waits
// briefly for the server's reply before dropping the socket.
func (w *wsConn) close() {
	if w == nil {
		return
	}
	w.closing.Store(true)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	_ = w.c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(5*time.Second))
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
	_ = w.c.Close()
}

// abort drops the socket at once.
func (w *wsConn) abort() {
	w.closing.Store(true)
	_ = w.c.Close()
}
