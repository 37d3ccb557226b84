package main

import (
	"github.com/talkgraph/talkgraph/service"
)

// encodeCursorForTest returns the cursor of position 0 in sid's log. (The other arguments
// exist so callers can show where the shape came from.)
func encodeCursorForTest(sid, _, _ string) string {
	return service.EncodeCursor(sid, service.Cursor{})
}
