package graph

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/service"
)

// Codes are the values of extensions.code, one per service error code. This is the one
// place where domain errors become API errors.
var codes = map[string]string{
	service.EINVALID:      "BAD_USER_INPUT",
	service.ENOTFOUND:     "NOT_FOUND",
	service.ECONFLICT:     "CONFLICT",
	service.EUNAUTHORIZED: "UNAUTHENTICATED",
	service.ERATELIMIT:    "RATE_LIMITED",
	service.EUNAVAILABLE:  "UNAVAILABLE",
	service.EBUDGET:       "BUDGET_EXCEEDED",
	service.EINTERNAL:     "INTERNAL",
	// A cursor of a log that no longer holds what follows it (viewerEvents past
	// VIEWER_EVENTS_RETENTION): read the state again.
	service.ECURSOREXPIRED: "CURSOR_EXPIRED",
}

// Code returns the extensions.code of err: its service code's, or INTERNAL.
func Code(err error) string {
	if c, ok := codes[service.ErrorCode(err)]; ok {
		return c
	}
	return codes[service.EINTERNAL]
}

// Error turns a service error into a GraphQL error with extensions.code and the error's
// message, for the transports to answer requests they refuse before the executor runs.
func Error(err error) *gqlerror.Error {
	return &gqlerror.Error{Message: service.ErrorMessage(err), Extensions: map[string]any{"code": Code(err)}}
}

// maxMessage bounds an error's message, in characters. The parser's and the validator's
// messages quote names from the query, and gqlgen's quote the operation name: a client's
// text is never sent back longer than this.
const maxMessage = 300

// ErrorPresenter turns a resolver's error into a GraphQL error with extensions.code.
// Errors without a service code become INTERNAL with a generic message; their detail goes
// to the log only. Every message is cut to maxMessage characters.
func ErrorPresenter(log *slog.Logger) graphql.ErrorPresenterFunc {
	present := presenter(log)
	return func(ctx context.Context, err error) *gqlerror.Error {
		gerr := present(ctx, err)
		if m := clip(gerr.Message, maxMessage); m != gerr.Message {
			cp := *gerr // the presenter may give back the error it was given
			cp.Message = m
			gerr = &cp
		}
		return gerr
	}
}

func presenter(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gerr := graphql.DefaultErrorPresenter(ctx, err)
		var se *service.Error
		if errors.As(err, &se) {
			gerr.Message = se.Message
			if gerr.Extensions == nil {
				gerr.Extensions = map[string]any{}
			}
			gerr.Extensions["code"] = codes[se.Code]
			if se.Code == service.EINTERNAL || se.Code == service.EUNAVAILABLE {
				log.Error("operation failed", "path", gerr.Path.String(), "err", err)
			}
			return gerr
		}
		var already *gqlerror.Error
		if errors.As(err, &already) && already.Extensions["code"] != nil {
			return gerr // validation, parsing, complexity: gqlgen's own codes
		}
		if errors.As(err, &already) && already.Err == nil && gerr.Path == nil {
			return gerr // an error about the request itself, not a resolver's
		}
		log.Error("operation failed", "path", gerr.Path.String(), "err", err)
		return &gqlerror.Error{Message: "internal error", Path: gerr.Path, Locations: gerr.Locations,
			Extensions: map[string]any{"code": codes[service.EINTERNAL]}}
	}
}

// Recover turns a resolver's panic into an INTERNAL error, logging the stack.
func Recover(log *slog.Logger) graphql.RecoverFunc {
	return func(ctx context.Context, p any) error {
		log.Error("resolver panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return service.Errorf(service.EINTERNAL, "internal error")
	}
}
