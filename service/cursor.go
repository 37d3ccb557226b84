package service

import (
	"encoding/base64"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Cursors are opaque to clients: base64url of "s:<session>:<seq>:<off>" for the event log
// and "m:<seq>" for a message in a history, "l:<unixnano>:<id>" for the session list.

// EncodeCursor returns the cursor string of position c in the log of sessionID.
func EncodeCursor(sessionID string, c Cursor) string {
	raw := "s:" + sessionID + ":" + strconv.FormatInt(c.Seq, 10) + ":" + strconv.Itoa(c.Off)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeCursor parses a cursor of the log of sessionID; EINVALID when it is malformed or
// belongs to another session.
func DecodeCursor(sessionID, s string) (Cursor, error) {
	bad := Errorf(EINVALID, "invalid cursor")
	if len(s) > 200 { // before decoding: a header (Last-Event-ID) may hold a megabyte
		return Cursor{}, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 4 || parts[0] != "s" {
		return Cursor{}, bad
	}
	if parts[1] != sessionID {
		return Cursor{}, Errorf(EINVALID, "cursor belongs to another session")
	}
	seq, err1 := strconv.ParseInt(parts[2], 10, 64)
	off, err2 := strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || seq < 0 || off < 0 {
		return Cursor{}, bad
	}
	return Cursor{Seq: seq, Off: off}, nil
}

// CursorOf returns the position just after ev.
func CursorOf(ev *Event) Cursor {
	c := Cursor{Seq: ev.Seq}
	if ev.Type.Chunky() {
		c.Off = ev.Offset + utf8.RuneCountInString(ev.Delta)
	}
	return c
}

// EncodeMessageCursor returns the history cursor of m.
func EncodeMessageCursor(m *Message) string {
	return base64.RawURLEncoding.EncodeToString([]byte("m:" + strconv.FormatInt(m.Seq, 10)))
}

// DecodeMessageCursor parses a history cursor; EINVALID when malformed.
func DecodeMessageCursor(s string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || !strings.HasPrefix(string(raw), "m:") {
		return 0, Errorf(EINVALID, "invalid cursor")
	}
	seq, err := strconv.ParseInt(string(raw[2:]), 10, 64)
	if err != nil || seq < 0 {
		return 0, Errorf(EINVALID, "invalid cursor")
	}
	return seq, nil
}

// EncodeSessionCursor returns the session-list cursor of s.
func EncodeSessionCursor(s *TalkSession) string {
	raw := "l:" + strconv.FormatInt(s.UpdatedAt.UnixNano(), 10) + ":" + s.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeSessionCursor parses a session-list cursor; EINVALID when malformed.
func DecodeSessionCursor(s string) (*SessionPosition, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	parts := strings.SplitN(string(raw), ":", 3)
	if err != nil || len(parts) != 3 || parts[0] != "l" {
		return nil, Errorf(EINVALID, "invalid cursor")
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, Errorf(EINVALID, "invalid cursor")
	}
	return &SessionPosition{UpdatedAt: unixNano(ns), ID: parts[2]}, nil
}

// EncodeFireCursor returns the cursor of a schedule's fire f in its list of fires.
func EncodeFireCursor(f *ScheduleFire) string {
	raw := "f:" + strconv.FormatInt(f.ScheduledAt.UnixNano(), 10) + ":" + f.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeFireCursor parses a fire cursor; EINVALID when malformed.
func DecodeFireCursor(s string) (*FirePosition, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	parts := strings.SplitN(string(raw), ":", 3)
	if err != nil || len(parts) != 3 || parts[0] != "f" {
		return nil, Errorf(EINVALID, "invalid cursor")
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, Errorf(EINVALID, "invalid cursor")
	}
	return &FirePosition{ScheduledAt: unixNano(ns), ID: parts[2]}, nil
}

// runeSlice returns s without its first n code points.
func runeSlice(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[i:]
		}
		n--
	}
	return ""
}
