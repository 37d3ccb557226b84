package client

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Khan/genqlient/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Code is the kind of an error the server answered: its extensions.code. The server's
// docs/API.md, section Errors, says what each one means and what a client should do.
type Code string

// The codes a client acts on.
const (
	// Unauthenticated: no token, or a bad or expired one. Get a new token.
	Unauthenticated Code = "UNAUTHENTICATED"
	// NotFound: it does not exist, was deleted, or is another user's. Do not retry.
	NotFound Code = "NOT_FOUND"
	// BadUserInput: the request is wrong on its face; retrying as is fails again.
	BadUserInput Code = "BAD_USER_INPUT"
	// Conflict: the session's state does not allow it now (answered already, busy under
	// REJECT, an idempotency key reused for other content). Re-read the session.
	Conflict Code = "CONFLICT"
	// RateLimited: too much at once. Back off and retry.
	RateLimited Code = "RATE_LIMITED"
	// Unavailable: the server cannot do it now (shutting down, storage full) and changed
	// nothing. Retry with backoff; addMessage with the same idempotency key.
	Unavailable Code = "UNAVAILABLE"
	// Internal: a bug or an unexpected failure on the server.
	Internal Code = "INTERNAL"
)

// Error is an error the server answered: a GraphQL error, a refused HTTP request, or a
// websocket the server closed. Errors of the network are not Errors.
type Error struct {
	// Code is the error's extensions.code; "" when the server gave none (a websocket
	// closed with a code that has no GraphQL meaning, say).
	Code Code
	// Message is the server's message, written to be shown to a user.
	Message string
	// StatusCode is the HTTP status when it was not 200 (401, 429, 503, ...); 0 otherwise.
	StatusCode int
	// CloseCode is the websocket close code when the server closed a stream's socket
	// (4401, 4400, ...); 0 otherwise.
	CloseCode int
}

func (e *Error) Error() string {
	msg := e.Message
	switch {
	case e.Code != "":
		msg = string(e.Code) + ": " + msg
	case e.CloseCode != 0:
		msg = fmt.Sprintf("websocket closed with %d: %s", e.CloseCode, msg)
	case e.StatusCode != 0:
		msg = fmt.Sprintf("HTTP %d: %s", e.StatusCode, msg)
	}
	return "talkgraph: " + msg
}

// CodeOf returns the code of the server's error in err's chain, or "" when err is nil or
// not an error the server answered (a network failure, a cancelled context).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// fromGraphQL turns what genqlient's client returns into an *Error where the server
// answered; other errors (the network's, the context's) are returned as they are, wrapped
// with the operation's name.
func fromGraphQL(op string, err error) error {
	if err == nil {
		return nil
	}
	var list gqlerror.List
	var httpErr *graphql.HTTPError
	switch {
	case errors.As(err, &list) && len(list) > 0:
		return firstError(list, 0)
	case errors.As(err, &httpErr):
		e := firstError(httpErr.Response.Errors, httpErr.StatusCode)
		if e.Code == "" {
			e.Code = codeOfStatus(httpErr.StatusCode)
		}
		return e
	}
	return fmt.Errorf("talkgraph: %s: %w", op, err)
}

// firstError is the first of a response's errors as an *Error: the one a server names
// when it refuses an operation.
func firstError(list gqlerror.List, status int) *Error {
	e := &Error{StatusCode: status}
	if len(list) == 0 {
		e.Message = http.StatusText(status)
		return e
	}
	e.Message = list[0].Message
	if code, ok := list[0].Extensions["code"].(string); ok {
		e.Code = Code(code)
	}
	return e
}

// codeOfStatus is the code an HTTP status means when the body names none.
func codeOfStatus(status int) Code {
	switch status {
	case http.StatusUnauthorized:
		return Unauthenticated
	case http.StatusTooManyRequests:
		return RateLimited
	case http.StatusServiceUnavailable:
		return Unavailable
	}
	return ""
}
