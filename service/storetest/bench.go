package storetest

import (
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// BenchmarkApplyChunk measures what streaming costs the Store: each operation appends one
// MessageChunk event and upserts the message it belongs to, in one batch, as the service
// does when it flushes a reply's text. The message keeps a fixed size (a few hundred
// bytes) so that every operation costs the same.
func BenchmarkApplyChunk(b *testing.B, s service.Store) {
	ctx := b.Context()
	m := newMessage("m1", "s1", 1)
	if err := s.Apply(ctx, &service.Batch{SessionID: "s1", Session: newSession("s1", "u1", t0),
		Messages: []*service.Message{m},
		Events:   []*service.Event{{Type: service.EventMessageAdded, At: t0, Message: newMessage("m1", "s1", 1)}},
	}); err != nil {
		b.Fatal(err)
	}
	base := strings.Repeat("streamed text ", 20)
	offset := 0
	b.ReportAllocs()
	for b.Loop() {
		delta := "word "
		m.Content = base[len(delta):] + delta
		ev := chunk("m1", delta, offset)
		offset += len(delta)
		if err := s.Apply(ctx, &service.Batch{SessionID: "s1", Messages: []*service.Message{m},
			Events: []*service.Event{ev}}); err != nil {
			b.Fatal(err)
		}
	}
}
