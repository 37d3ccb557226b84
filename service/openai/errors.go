package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/talkgraph/talkgraph/service"
)

// runError is how a failed run ends: Unwrap gives the *service.Error the user is shown,
// Error adds what an operator needs in a log. Both are built from strings that went through
// redact; the underlying error values (the SDK's, net/http's) are dropped on purpose, so
// that no chain can lead back to text holding the API key.
type runError struct {
	public *service.Error
	detail string
}

func (e *runError) Error() string { return "openai: " + e.detail }
func (e *runError) Unwrap() error { return e.public }

// failure describes one failed attempt at a request, before it becomes a runError.
type failure struct {
	message string // for the user
	cause   string // for the log; may hold anything and is redacted before use
	retry   bool   // worth another attempt, if nothing was streamed yet
	// retryAfter is the provider's Retry-After, or -1 when it sent none.
	retryAfter time.Duration
	status     int // the HTTP status the provider answered, 0 when it answered none
}

func (f *failure) Error() string { return f.message + ": " + f.cause }

// err turns f into the run's error, with the key removed from every string.
func (f *failure) err(key *secret) error {
	msg := key.redact(f.message)
	return &runError{
		public: service.Errorf(service.EUNAVAILABLE, "%s", msg),
		detail: msg + ": " + key.redact(f.cause),
	}
}

// statusError is an HTTP response the provider answered with a 4xx or 5xx status. The
// middleware in attempt returns it in place of the SDK's own error, which would keep the
// request (and its Authorization header) reachable.
type statusError struct {
	status     int
	retryAfter time.Duration // -1 when absent
	message    string        // the provider's own words, if it gave any
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.status, e.message)
}

// failureFor turns an error status into a failure with a message for the user.
func failureFor(e *statusError) *failure {
	f := &failure{cause: e.Error(), retryAfter: e.retryAfter, status: e.status}
	switch {
	case e.status == http.StatusUnauthorized:
		f.message = "the model provider refused the API key"
	case e.status == http.StatusForbidden:
		f.message = "the model provider refused access (HTTP 403)"
	case e.status == http.StatusTooManyRequests:
		f.message = "the model provider is rate limiting requests; try again later"
		f.retry = true
	case e.status == http.StatusRequestTimeout || e.status >= 500:
		f.message = fmt.Sprintf("the model provider is unavailable (HTTP %d); try again later", e.status)
		f.retry = true
	case e.status == http.StatusNotFound:
		f.message = "the model provider does not know this model or endpoint (HTTP 404)"
		if e.message != "" {
			f.message += ": " + e.message
		}
	default:
		f.message = fmt.Sprintf("the model provider rejected the request (HTTP %d)", e.status)
		if e.message != "" {
			f.message += ": " + e.message
		}
	}
	return f
}

// providerMessage extracts a short, printable message from an error body in the shapes
// providers use: OpenAI's {"error":{"message":…}}, Ollama's {"error":"…"}, vLLM's
// {"message":…} and FastAPI's {"detail":…}. It returns "" when it finds none; raw bodies
// (HTML error pages) are not shown. The key is removed before the message is cut short,
// so that no beginning of it is left at the cut.
func providerMessage(body []byte, key *secret) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	var inner struct {
		Message string `json:"message"`
	}
	var s string
	switch {
	case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
		s = inner.Message
	case json.Unmarshal(v.Error, &s) == nil && s != "":
	case json.Unmarshal(v.Message, &s) == nil && s != "":
	case json.Unmarshal(v.Detail, &s) == nil && s != "":
	default:
		return ""
	}
	return clip(key.redact(s), 300)
}

// clip makes s one printable line of at most n runes.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

// parseRetryAfter reads retry-after-ms (OpenAI's) or Retry-After (seconds or an HTTP
// date). It returns -1 when neither is usable.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return -1
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
		return 0
	}
	return -1
}

// streamErrorMessage extracts the message of an in-stream error event's data.
func streamErrorMessage(data []byte, key *secret) string {
	if m := providerMessage(data, key); m != "" {
		return m
	}
	return "unknown error"
}

var errStalled = errors.New("no data from the model provider within the idle timeout")
