package service

import (
	"errors"
	"fmt"
)

// Error codes. Each names a kind of failure a client can act on; the GraphQL layer maps
// them to extensions.code in one place.
const (
	EINVALID      = "invalid"      // bad input: empty, oversized, malformed IDs or cursors
	ENOTFOUND     = "not_found"    // missing, or belonging to another user
	ECONFLICT     = "conflict"     // the state does not allow it now (answered twice, busy with REJECT)
	EUNAUTHORIZED = "unauthorized" // no user, or a bad token
	ERATELIMIT    = "rate_limited" // too many operations or runs
	EUNAVAILABLE  = "unavailable"  // shutting down, or storage cannot be written
	EBUDGET       = "budget"       // a token budget is spent: the user's for the period
	EINTERNAL     = "internal"     // a bug or an unexpected failure; details stay in the log
	// ECURSOREXPIRED: a cursor of a log that no longer holds what follows it (a viewer
	// cursor older than the retention): read the state again.
	ECURSOREXPIRED = "cursor_expired"
)

// Error is a failure with a code and a message fit to show a user.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for any other
// non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the user-facing message of err: the *Error's own, or a generic one
// for errors without a code, so that internals never leak.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
