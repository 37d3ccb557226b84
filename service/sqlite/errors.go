package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/talkgraph/talkgraph/service"
)

// fail turns err from operation op into the error the Store returns: EUNAVAILABLE, with a
// message fit for a user, when the storage cannot be reached or written, wrapped around
// the driver's error for the log. Coded errors and context errors pass through.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var coded *service.Error
	if errors.As(err, &coded) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if msg := unavailable(err); msg != "" {
		return fmt.Errorf("sqlite: %s: %w: %w", op, service.Errorf(service.EUNAVAILABLE, "%s", msg), err)
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// unavailable returns what is wrong with the storage when err says it cannot be reached or
// written, and "" for other errors.
func unavailable(err error) string {
	code, ok := driverCode(err)
	if !ok {
		return ""
	}
	switch code {
	case codeFull:
		return "storage is full"
	case codeBusy, codeLocked:
		return "storage is locked by another process"
	case codeReadOnly:
		return "storage is read-only"
	case codeIOErr:
		return "storage cannot be read or written (disk I/O error)"
	case codeCantOpen, codePerm:
		return "storage cannot be opened"
	case codeCorrupt, codeNotADB:
		return "storage is damaged"
	}
	return ""
}

// SQLite's primary result codes (https://sqlite.org/rescode.html), the same whatever the
// driver; driverCode gives them.
const (
	codePerm       = 3
	codeBusy       = 5
	codeLocked     = 6
	codeReadOnly   = 8
	codeIOErr      = 10
	codeCorrupt    = 11
	codeFull       = 13
	codeCantOpen   = 14
	codeConstraint = 19
	codeNotADB     = 26
)
