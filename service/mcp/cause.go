package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Why a connection ended, in words fit for the model and the user: a call under way when
// it ended says so (conn.ctx's cause), and the log says it with the server's last lines of
// stderr besides. Nothing here holds what the server wrote to stderr (a stack trace, a
// secret), nor a secret of the configuration (see server.redact).

// errShutdown ends the connections when talkgraph shuts down.
var errShutdown = errors.New("talkgraph is shutting down")

// lineTooLongError is how a stdio server's connection ends when the server writes a line
// longer than Limits.MaxMessageBytes.
type lineTooLongError struct{ max int }

func (e lineTooLongError) Error() string {
	return fmt.Sprintf("it wrote a line longer than %d bytes", e.max)
}

// lineReader reads a stdio server's stdout and fails with lineTooLongError once a line
// (what comes between two newlines) grows past max bytes, so that a server cannot make
// talkgraph hold more, and the connection's end says why.
type lineReader struct {
	r    io.ReadCloser
	max  int
	line int // bytes of the current line so far
	err  error
}

func (l *lineReader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.line += len(rest)
			break
		}
		if l.line+i > l.max {
			l.line += i
			break
		}
		l.line, rest = 0, rest[i+1:]
	}
	if l.line > l.max {
		// What was read with the long line goes too: the connection ends here.
		l.err = lineTooLongError{l.max}
		return 0, l.err
	}
	return n, err
}

func (l *lineReader) Close() error { return l.r.Close() }

// stdioTransport is the SDK's transport over a process's stdin and stdout, whose
// connection notes on c the first of its reads and writes that fails, before the SDK
// hands the failure to the calls under way: a call that fails then knows that its
// connection is ending (conn.failed), and the supervisor knows what the server did.
type stdioTransport struct {
	sdk.IOTransport
	c *conn
}

func (t *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	sc, err := t.IOTransport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &notedConn{Connection: sc, c: t.c}, nil
}

// notedConn is a stdio connection that notes its first failure on its conn. (The SDK's
// stdio connection has no abilities besides Connection's methods for a notedConn to hide.)
type notedConn struct {
	sdk.Connection
	c *conn
}

func (n *notedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := n.Connection.Read(ctx)
	if err != nil && ctx.Err() == nil {
		n.c.fail(err, true)
	}
	return msg, err
}

func (n *notedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := n.Connection.Write(ctx, msg)
	if err != nil && ctx.Err() == nil {
		n.c.fail(err, false)
	}
	return err
}

// fail notes the first failure of a stdio connection's reads (read) or writes.
func (c *conn) fail(err error, read bool) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failure == nil {
		c.failure, c.readFailed = err, read
	}
}

// failed returns the first failure of a stdio connection's reads or writes, if one
// failed, and whether it was a read.
func (c *conn) failed() (err error, read bool) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	return c.failure, c.readFailed
}

// stdioCause says why a stdio server's connection ended: what the server wrote that
// broke the protocol, or else how its process ended. It waits for the session to end
// (done is closed then), as the session reads what the process wrote before it ended,
// and then for the process to exit, each at most stopGrace: a process that closed its
// stdout exits, or is about to be stopped.
func (c *conn) stdioCause(done <-chan struct{}) error {
	select {
	case <-done:
	case <-time.After(stopGrace):
	}
	err, read := c.failed()
	var long lineTooLongError
	switch {
	case errors.As(err, &long):
		return long
	case read && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, os.ErrClosed):
		return fmt.Errorf("it wrote a line that is not a JSON-RPC message (%s)", cut(err.Error(), maxCauseDetail))
	}
	select {
	case <-c.proc.exited:
		return exitCause(c.proc.err)
	case <-time.After(stopGrace):
	}
	if err != nil && !read {
		return errors.New("it stopped reading its stdin")
	}
	return errors.New("it closed its stdout")
}

// maxCauseDetail bounds what a cause quotes of an error the server caused.
const maxCauseDetail = 200

// exitCause says how a server's process ended, from cmd.Wait's error.
func exitCause(err error) error {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return errors.New("its process exited with status 0")
	case errors.As(err, &exit) && exit.Exited():
		return fmt.Errorf("its process exited with status %d", exit.ExitCode())
	case errors.As(err, &exit):
		return fmt.Errorf("its process was ended by a signal (%s)", strings.TrimPrefix(exit.String(), "signal: "))
	}
	return fmt.Errorf("its process could not be waited for: %v", err)
}

// httpCause says why a connection to a server reached by URL ended, from the SDK's error
// and what the HTTP client saw: a request that got no answer says the server went away.
func (s *server) httpCause(err error) error {
	var u *url.Error
	switch {
	case err == nil:
		return errors.New("the connection ended")
	case errors.Is(err, sdk.ErrSessionMissing):
		return errors.New("the HTTP server no longer knows talkgraph's session (it may have restarted)")
	case errors.As(err, &u):
		return fmt.Errorf("the HTTP server went away (%s)", s.redact(cut(u.Err.Error(), maxCauseDetail)))
	case s.lastNetErr() != nil:
		return fmt.Errorf("the HTTP server went away (%s)", s.redact(cut(s.lastNetErr().Error(), maxCauseDetail)))
	}
	return fmt.Errorf("the connection failed: %s", s.redact(cut(err.Error(), maxCauseDetail)))
}

// minSecret is the shortest header value redact takes out of a text.
const minSecret = 8

// redact takes the secrets of a server's configuration out of a text: the URL's
// password and query, and the headers' values. The URL is shown as its scheme, host and
// path, as talkgraph's other settings are.
func (s *server) redact(text string) string {
	if s.cfg.URL == "" {
		return text
	}
	u, err := url.Parse(s.cfg.URL)
	if err != nil {
		return "[redacted]"
	}
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	pairs := []string{s.cfg.URL, shown, u.String(), shown, u.Redacted(), shown}
	if u.User != nil {
		// As net/http quotes a URL in its errors.
		stripped := strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
		pairs = append(pairs, stripped, shown)
		if p, ok := u.User.Password(); ok && p != "" {
			pairs = append(pairs, p, "[redacted]")
		}
	}
	if u.RawQuery != "" {
		pairs = append(pairs, u.RawQuery, "[redacted]")
	}
	for _, v := range s.cfg.Headers {
		if len(v) >= minSecret { // a shorter value is no secret, and replacing it would garble the text
			pairs = append(pairs, v, "[redacted]")
		}
	}
	return strings.NewReplacer(pairs...).Replace(text)
}
