package postgres_test

import (
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// TestText checks what PostgreSQL's text could not keep: free text with NUL characters
// round-trips; an identifier with one is refused alone with EINVALID.
func TestText(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	sess := newSession("s1")
	sess.Title = "a\x00b ✓"
	content := "nul \x00 here, ünïcode ✓, and an empty answer next"
	empty := ""
	m := &service.Message{ID: "m1", SessionID: "s1", Seq: 1, Content: content, Role: service.RoleAssistant,
		Kind: service.KindText, Status: service.MessageComplete, CreatedAt: t0}
	q := &service.Question{ID: "q1", RunID: "r1", SessionID: "s1", Prompt: "?\x00", Answer: &empty, AskedAt: t0, AnsweredAt: &t0}
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Create: sess, Events: []*service.Event{
		{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: m},
		{Seq: 2, Type: service.EventMessageChunk, At: t0, Key: "m1", MessageID: "m1", Delta: "\x00"},
		{Seq: 3, Type: service.EventQuestionAnswered, At: t0, Question: q},
	}}))
	got, err := s.Session(ctx, "s1")
	must(t, err)
	if got.Title != sess.Title {
		t.Errorf("title = %q, want %q", got.Title, sess.Title)
	}
	gm, err := s.Message(ctx, "m1")
	must(t, err)
	if gm.Content != content {
		t.Errorf("content = %q, want %q", gm.Content, content)
	}
	gq, err := s.Question(ctx, "q1")
	must(t, err)
	if gq.Prompt != q.Prompt || gq.Answer == nil || *gq.Answer != "" || gq.Choices != nil {
		t.Errorf("question = %+v, want prompt %q, an empty answer and no choices", gq, q.Prompt)
	}
	evs, err := s.Events(ctx, "s1", 1, 1)
	must(t, err)
	if len(evs) != 1 || evs[0].Delta != "\x00" {
		t.Errorf("chunk = %+v, want a NUL delta", evs)
	}

	errs := s.Append(ctx, []*service.Batch{chunkBatch("s\x00", 1, "x"), chunkBatch("s1", 4, "x")})
	wantCode(t, "a session ID with NUL", errs[0], service.EINVALID)
	if errs[1] != nil {
		t.Errorf("the good batch beside it: %v", errs[1])
	}
	if _, err := s.Session(ctx, "s\x00"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("Session with a NUL ID: %v, want ENOTFOUND", err)
	}
	if qs, err := s.Questions(ctx, []string{"q1", "\xff"}); err != nil || len(qs) != 1 {
		t.Errorf("Questions with an invalid ID: %v, %v", qs, err)
	}
}

// TestTimes checks the ends of the time range: the zero time round-trips, and a time
// beyond what int64 nanoseconds hold is refused with EINVALID.
func TestTimes(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	sess := newSession("s1")
	sess.CreatedAt = time.Time{}
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Create: sess}))
	got, err := s.Session(ctx, "s1")
	must(t, err)
	if !got.CreatedAt.IsZero() || got.UpdatedAt != t0 {
		t.Errorf("times = %v, %v; want zero and %v", got.CreatedAt, got.UpdatedAt, t0)
	}
	far := newSession("s2")
	far.UpdatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	wantCode(t, "a time in the year 3000", appendOne(s, &service.Batch{SessionID: "s2", Create: far}), service.EINVALID)
	// As a bound it is fine.
	if ss, err := s.Sessions(ctx, "u1", &service.SessionPosition{UpdatedAt: far.UpdatedAt, ID: "z"}, 0); err != nil || len(ss) != 1 {
		t.Errorf("Sessions after the year 3000: %v, %v", ss, err)
	}
}
