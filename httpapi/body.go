package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// bodies reads a request's body whole before its handler sees it, within timeout and at
// most max bytes, with at most reading requests of one client address reading theirs at
// once. The HTTP server has no read timeout of its own (it would cut server-sent events,
// which are long requests), so without this a client that sends its body a byte at a time
// holds a connection and a goroutine for as long as it likes, and as many as it likes.
// The read deadline is the connection's, set once the request's headers have passed the
// checks that need nothing else (see refuse), and lifted once the body is read: a stream
// that follows is not cut.
type bodies struct {
	max     int64
	timeout time.Duration
	reading *slots // per client address
	addrs   clientAddresses
}

// read reads the body of each request with one, then serves it with next.
func (b *bodies) read(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > b.max {
			refuse(w, r, http.StatusRequestEntityTooLarge, service.Errorf(service.EINVALID, "request body is too large: at most %d bytes", b.max))
			return
		}
		addr := b.addrs.of(r)
		if !b.reading.take(addr) {
			tooMany(w, r, time.Second, "too many requests from your address are sending their body at once")
			return
		}
		ctl := http.NewResponseController(w)
		_ = ctl.SetReadDeadline(time.Now().Add(b.timeout))
		body, err := readAll(r.Body, r.ContentLength, b.max)
		b.reading.release(addr)
		switch {
		case errors.Is(err, errBodyTooLarge):
			refuse(w, r, http.StatusRequestEntityTooLarge, service.Errorf(service.EINVALID, "request body is too large: at most %d bytes", b.max))
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			refuse(w, r, http.StatusRequestTimeout, service.Errorf(service.EINVALID, "the request body did not arrive within %s", b.timeout))
			return
		case err != nil: // the client went away, or sent a broken chunked body
			refuse(w, r, http.StatusBadRequest, service.Errorf(service.EINVALID, "the request body could not be read"))
			return
		}
		// The HTTP/1 server clears the deadline itself once a body ends, as it starts watching
		// the connection for the client leaving; said here, so that no server can cut a
		// stream that follows the body.
		_ = ctl.SetReadDeadline(time.Time{})
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

var errBodyTooLarge = errors.New("request body too large")

// firstBuffer is the most a declared Content-Length makes readAll allocate before the
// bytes arrive: beyond it the buffer grows with what comes, so a client that declares a
// megabyte and sends nothing costs little.
const firstBuffer = 64 << 10

// readAll reads r to its end, refusing more than max bytes; size is the length the
// request declared (-1 when it did not).
func readAll(r io.Reader, size, max int64) ([]byte, error) {
	c := int64(512)
	if size >= 0 {
		c = min(size, firstBuffer)
	}
	buf := make([]byte, 0, c+1) // one more: the read that finds the end needs room
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// refuse answers a request refused before its body was read (by a check of its headers,
// or because the body is too large or too slow) and has its connection closed once the
// answer is out. Left open, the connection would be kept for the next request, and the
// HTTP server would first read what is left of the body (up to 256 KB, however slowly it
// comes) before it even sent the answer.
func refuse(w http.ResponseWriter, r *http.Request, status int, err error) {
	if r.ContentLength != 0 { // a body follows, or may (chunked)
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	writeError(w, status, err)
}
