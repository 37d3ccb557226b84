package service_test

import (
	"encoding/base64"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

func TestDecodeCursor(t *testing.T) {
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	t.Run("round-trips the position in the log of its session", func(t *testing.T) {
		for _, c := range []service.Cursor{{}, {Seq: 1}, {Seq: 1 << 40, Off: 12345}} {
			got, err := service.DecodeCursor("sess", service.EncodeCursor("sess", c))
			if err != nil || got != c {
				t.Errorf("%+v came back as %+v, %v", c, got, err)
			}
		}
	})
	t.Run("EINVALID when malformed or of another session", func(t *testing.T) {
		for name, s := range map[string]string{
			"empty":              "",
			"not base64":         "***",
			"too long":           raw("s:sess:1:0:" + string(make([]byte, 200))),
			"three parts":        raw("s:sess:1"),
			"another kind":       raw("m:sess:1:0"),
			"a negative Seq":     raw("s:sess:-1:0"),
			"a negative offset":  raw("s:sess:1:-2"),
			"a Seq not a number": raw("s:sess:x:0"),
			"another session":    service.EncodeCursor("other", service.Cursor{Seq: 1}),
		} {
			_, err := service.DecodeCursor("sess", s)
			wantCode(t, name, err, service.EINVALID)
		}
	})
}

func TestCursorOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   service.Event
		want service.Cursor
	}{
		{"after an event that is not a chunk: its Seq", service.Event{Seq: 4, Type: service.EventMessageAdded}, service.Cursor{Seq: 4}},
		{"after a chunk: its Seq and where its text ends, in code points", service.Event{Seq: 5, Type: service.EventMessageChunk, Offset: 3, Delta: "héllo"}, service.Cursor{Seq: 5, Off: 8}},
		{"after a tool's output the same", service.Event{Seq: 6, Type: service.EventToolCallOutput, Offset: 0, Delta: "ok"}, service.Cursor{Seq: 6, Off: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := service.CursorOf(&tc.ev); got != tc.want {
				t.Errorf("CursorOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMessageCursor(t *testing.T) {
	t.Run("round-trips a message's Seq", func(t *testing.T) {
		seq, err := service.DecodeMessageCursor(service.EncodeMessageCursor(&service.Message{Seq: 42}))
		if err != nil || seq != 42 {
			t.Errorf("got %d, %v", seq, err)
		}
	})
	t.Run("EINVALID when malformed", func(t *testing.T) {
		for _, s := range []string{"", "***", service.EncodeCursor("s", service.Cursor{Seq: 1}), base64.RawURLEncoding.EncodeToString([]byte("m:-1")), base64.RawURLEncoding.EncodeToString([]byte("m:x"))} {
			_, err := service.DecodeMessageCursor(s)
			wantCode(t, "cursor "+s, err, service.EINVALID)
		}
	})
}

func TestSessionCursor(t *testing.T) {
	t.Run("round-trips a session's place in the list", func(t *testing.T) {
		s := &service.TalkSession{ID: "a:b", UpdatedAt: t0}
		pos, err := service.DecodeSessionCursor(service.EncodeSessionCursor(s))
		if err != nil || pos.ID != "a:b" || !pos.UpdatedAt.Equal(t0) {
			t.Errorf("got %+v, %v", pos, err)
		}
	})
	t.Run("EINVALID when malformed", func(t *testing.T) {
		for _, s := range []string{"***", service.EncodeCursor("s", service.Cursor{Seq: 1}), base64.RawURLEncoding.EncodeToString([]byte("l:x:id")), base64.RawURLEncoding.EncodeToString([]byte("l:5"))} {
			_, err := service.DecodeSessionCursor(s)
			wantCode(t, "cursor "+s, err, service.EINVALID)
		}
	})
}
