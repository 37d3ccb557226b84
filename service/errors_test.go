package service_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

func TestErrorCodeAndMessage(t *testing.T) {
	e := service.Errorf(service.ENOTFOUND, "session %s not found", "x")
	for _, tc := range []struct {
		name          string
		err           error
		code, message string
	}{
		{"nil is no error", nil, "", ""},
		{"an *Error gives its code and message", e, service.ENOTFOUND, "session x not found"},
		{"a wrapped *Error gives the first in the chain", fmt.Errorf("reading: %w", e), service.ENOTFOUND, "session x not found"},
		{"any other error is EINTERNAL with a generic message, so that internals never leak", errPlain, service.EINTERNAL, "internal error"},
		{"a context's end is internal too", fmt.Errorf("x: %w", errors.New("context canceled")), service.EINTERNAL, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := service.ErrorCode(tc.err); got != tc.code {
				t.Errorf("ErrorCode = %q, want %q", got, tc.code)
			}
			if got := service.ErrorMessage(tc.err); got != tc.message {
				t.Errorf("ErrorMessage = %q, want %q", got, tc.message)
			}
		})
	}
	if got, want := e.Error(), "not_found: session x not found"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
