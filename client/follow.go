package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/cenkalti/backoff/v5"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Follow subscribes to a session's events (messageStream) over a websocket and yields
// them in the log's one order, each once: when the connection drops, or the server closes
// the socket (1001 when it shuts down, 4401 when the token expired), Follow reconnects
// with backoff and resumes after the last event it yielded, so the caller sees no gap and
// no duplicate. A replay may fold the chunks of a finished message into fewer, longer
// ones: place each delta at its Offset.
//
// after is where to start: a session's StreamCursor (from CreateSession or Session) or
// an event's cursor; Follow needs one, to resume without a gap. The sequence ends when
// the caller stops ranging over it; when the session is deleted (the server completes the
// stream, or, when the deletion overtakes an event on its way, answers it with NotFound);
// or with one last error: ctx's, a refusal the server would repeat (NotFound,
// BadUserInput, Unauthenticated without a new token from WithTokenSource), a server
// certificate not trusted, or a message that cannot be decoded. It retries everything
// else (network failures, Unavailable, RateLimited) until ctx ends; OnReconnect reports
// each retry.
//
// Follow reads the socket between two events only: while the loop body runs, nothing is
// read, and a body that blocks for long makes the server drop the connection, which
// Follow then resumes.
func (c *Client) Follow(ctx context.Context, sessionID, after string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		f := &follower{c: c, session: sessionID, cursor: after, yield: yield}
		if err := f.run(ctx); err != nil {
			yield(nil, err)
		}
	}
}

const (
	subscriptionID = "1"              // the only operation on a follower's socket
	ackTimeout     = 30 * time.Second // to open a connection up to connection_ack
	writeTimeout   = 10 * time.Second // for one message to the server
)

// follower is one Follow: its position in the session's log and its yield. It runs in the
// caller's goroutine, one connection at a time.
type follower struct {
	c       *Client
	session string
	cursor  string // the last event yielded, or where Follow started
	yield   func(Event, error) bool
}

// run connects, and reconnects after every failure worth retrying, until the stream
// ends; nil when the caller stopped or the server completed the stream.
func (f *follower) run(ctx context.Context) error {
	if f.cursor == "" {
		return errors.New("talkgraph: Follow needs a cursor to start after: a session's StreamCursor or an event's cursor")
	}
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     100 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         5 * time.Second,
	}
	bo.Reset()
	for {
		tok, err := f.c.token(ctx)
		if err != nil {
			return fmt.Errorf("talkgraph: token: %w", err)
		}
		err = f.connect(ctx, tok, bo)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case CodeOf(err) == Unauthenticated:
			// Resume only with a token other than the one refused.
			next, terr := f.c.token(ctx)
			if terr != nil || next == tok {
				return err
			}
		case !retryable(err):
			return err
		}
		wait := bo.NextBackOff()
		if f.c.onReconnect != nil {
			f.c.onReconnect(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// message is a graphql-transport-ws message.
type message struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// connect opens one connection, subscribes after f.cursor and yields events until the
// connection ends. nil: the caller stopped, or the server completed the stream.
func (f *follower) connect(ctx context.Context, token string, bo *backoff.ExponentialBackOff) error {
	u := *f.c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	conn, resp, err := f.c.dialer().DialContext(ctx, u.JoinPath("/query").String(), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return refusedUpgrade(resp)
		}
		return fmt.Errorf("talkgraph: connect: %w", err)
	}
	defer conn.Close()
	// A cancelled ctx ends a read that waits for the server.
	defer context.AfterFunc(ctx, func() { conn.Close() })()

	auth, _ := json.Marshal(map[string]string{"Authorization": "Bearer " + token})
	if err := send(conn, message{Type: "connection_init", Payload: auth}); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(ackTimeout))
	for acked := false; !acked; {
		m, err := receive(conn)
		if err != nil {
			return err
		}
		switch m.Type {
		case "connection_ack":
			acked = true
		case "ping":
			if err := send(conn, message{Type: "pong"}); err != nil {
				return err
			}
		case "pong":
		default:
			return &protocolError{fmt.Sprintf("%q before connection_ack", m.Type)}
		}
	}
	_ = conn.SetReadDeadline(time.Time{})

	vars, _ := json.Marshal(graphql.Request{
		Query:     messageStream_Operation,
		OpName:    "messageStream",
		Variables: &__messageStreamInput{SessionId: f.session, After: &f.cursor},
	})
	if err := send(conn, message{Type: "subscribe", ID: subscriptionID, Payload: vars}); err != nil {
		return err
	}
	for {
		m, err := receive(conn)
		if err != nil {
			return err
		}
		switch m.Type {
		case "ping":
			if err := send(conn, message{Type: "pong"}); err != nil {
				return err
			}
		case "next":
			ev, err := decodeEvent(m.Payload)
			if err != nil {
				return err
			}
			f.cursor = ev.GetCursor()
			bo.Reset() // the connection works: the next failure starts the backoff anew
			if !f.yield(ev, nil) {
				// Stop the subscription and say goodbye; the server needs nothing more.
				_ = send(conn, message{Type: "complete", ID: subscriptionID})
				_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				return nil
			}
		case "error":
			var list gqlerror.List
			if err := json.Unmarshal(m.Payload, &list); err != nil {
				return &protocolError{fmt.Sprintf("decoding an error message: %v", err)}
			}
			return firstError(list, 0)
		case "complete":
			return nil
		}
	}
}

// decodeEvent decodes a next message's payload: one event, or the errors it carries.
func decodeEvent(payload json.RawMessage) (Event, error) {
	var p struct {
		Data   *messageStreamResponse `json:"data"`
		Errors gqlerror.List          `json:"errors"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, &protocolError{fmt.Sprintf("decoding an event: %v", err)}
	}
	if len(p.Errors) > 0 {
		return nil, firstError(p.Errors, 0)
	}
	if p.Data == nil || p.Data.MessageStream == nil {
		return nil, &protocolError{"an event without data"}
	}
	return p.Data.MessageStream, nil
}

// dialer opens websockets the way the client's HTTP transport makes connections.
func (c *Client) dialer() *websocket.Dialer {
	d := &websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: ackTimeout,
		Subprotocols:     []string{"graphql-transport-ws"},
	}
	if t, ok := c.http.Transport.(*http.Transport); ok {
		d.Proxy, d.TLSClientConfig, d.NetDialContext = t.Proxy, t.TLSClientConfig, t.DialContext
	}
	return d
}

func send(conn *websocket.Conn, m message) error {
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := conn.WriteJSON(m); err != nil {
		return fmt.Errorf("talkgraph: sending %s: %w", m.Type, err)
	}
	return nil
}

// receive reads one message; a close from the server is an *Error with its CloseCode.
func receive(conn *websocket.Conn) (message, error) {
	var m message
	err := conn.ReadJSON(&m)
	var ce *websocket.CloseError
	var se *json.SyntaxError
	switch {
	case err == nil:
		return m, nil
	case errors.As(err, &ce):
		e := &Error{CloseCode: ce.Code, Message: ce.Text}
		if ce.Code == 4401 {
			e.Code = Unauthenticated
		}
		return m, e
	case errors.As(err, &se):
		return m, &protocolError{fmt.Sprintf("a message that is not JSON: %v", err)}
	}
	return m, fmt.Errorf("talkgraph: reading the stream: %w", err)
}

// refusedUpgrade is the *Error of an upgrade the server answered with an HTTP status
// (429 with too many sockets, 503 while it shuts down).
func refusedUpgrade(resp *http.Response) error {
	defer resp.Body.Close()
	var out struct{ Errors gqlerror.List }
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = json.Unmarshal(body, &out)
	e := firstError(out.Errors, resp.StatusCode)
	if e.Code == "" {
		e.Code = codeOfStatus(resp.StatusCode)
	}
	return e
}

// protocolError is a message the client cannot make sense of: retrying would not help.
type protocolError struct{ what string }

func (e *protocolError) Error() string { return "talkgraph: stream: " + e.what }

// retryable says whether a connection's end is worth a reconnection: everything but a
// refusal the server would repeat, a protocol error, and a certificate not trusted.
func retryable(err error) bool {
	var pe *protocolError
	var ce *tls.CertificateVerificationError
	if errors.As(err, &pe) || errors.As(err, &ce) {
		return false
	}
	var e *Error
	if !errors.As(err, &e) {
		return true // the network's
	}
	switch {
	case e.Code == RateLimited || e.Code == Unavailable:
		return true
	case e.Code != "":
		return false // NotFound, BadUserInput, Conflict, Internal, Unauthenticated
	case e.CloseCode != 0:
		// The codes that say the client is wrong; any other close means "reconnect".
		switch e.CloseCode {
		case websocket.CloseProtocolError, websocket.CloseUnsupportedData, websocket.CloseInvalidFramePayloadData,
			websocket.ClosePolicyViolation, websocket.CloseMessageTooBig, 4400, 4409, 4429:
			return false
		}
		return true
	}
	return e.StatusCode >= 500 || e.StatusCode == http.StatusTooManyRequests || e.StatusCode == http.StatusRequestTimeout
}
