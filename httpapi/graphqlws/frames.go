package graphqlws

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Frames: every message to the client is written whole, one writer at a time (wmu), with a
// deadline; a result is framed in a buffer borrowed from bufPool for the length of the
// write.

// writeNext sends one result of s; false when s is over or the connection is gone.
func (c *conn) writeNext(s *sub, resp *graphql.Response) bool {
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	buf.WriteString(`{"id":`)
	writeString(buf, s.id)
	buf.WriteString(`,"type":"` + c.proto.next + `","payload":{"data":`)
	if len(resp.Data) == 0 {
		buf.WriteString("null")
	} else {
		buf.Write(resp.Data)
	}
	if len(resp.Errors) > 0 {
		buf.WriteString(`,"errors":`)
		buf.Write(mustJSON(resp.Errors))
	}
	if len(resp.Extensions) > 0 {
		buf.WriteString(`,"extensions":`)
		buf.Write(mustJSON(resp.Extensions))
	}
	buf.WriteString("}}")
	return c.writeFor(s, buf.Bytes())
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// sendError ends an operation with errors.
func (c *conn) sendError(id string, errs gqlerror.List) {
	c.writeFrame(&message{ID: id, Type: "error", Payload: mustJSON(errs)})
}

// writeFrame sends one message of the protocol; false when the connection is gone.
func (c *conn) writeFrame(m *message) bool { return c.write(mustJSON(m)) }

// write sends one message. A write that fails or takes longer than WriteTimeout (the
// client stopped reading) ends the connection with 1001, so that the client reconnects and
// resumes.
func (c *conn) write(data []byte) bool {
	c.wmu.Lock()
	err := c.writeLocked(data)
	c.wmu.Unlock()
	return c.written(err)
}

// writeFor sends one message of s, unless s is over: once finish has forgotten s, nothing
// more is written for it, even by a goroutine that was rendering an event of s meanwhile.
// False when s is over or the connection is gone.
func (c *conn) writeFor(s *sub, data []byte) bool {
	c.wmu.Lock()
	c.mu.Lock()
	live := !c.closed && c.subs.get(s.id) == s
	c.mu.Unlock()
	if !live {
		c.wmu.Unlock()
		return false
	}
	err := c.writeLocked(data)
	c.wmu.Unlock()
	return c.written(err)
}

// writeLocked writes one message; c.wmu must be held.
func (c *conn) writeLocked(data []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.t.WriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// written ends the connection after a failed write; it reports whether the write worked.
func (c *conn) written(err error) bool {
	if err != nil {
		c.closeWith(CloseGoingAway, "the connection is not keeping up")
		return false
	}
	return true
}

// mustJSON is v in JSON; v is a value this package builds, which always encodes.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only values this package builds are encoded
	}
	return b
}

// writeString writes s as a JSON string.
func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}
