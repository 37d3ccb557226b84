package sqlite_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

// One Append writes many sessions' batches in one transaction. A batch that fails halfway
// (its first statements written, a later one refused) must fail alone and leave nothing
// behind, while the batches before and after it are written whole.
func TestBatchFailingHalfwayFailsAlone(t *testing.T) {
	s := mustOpen(t, tempPath(t), sqlite.Options{})
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
		if err := create(s, ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Message "taken" belongs to s0: a batch of another session that claims it passes the
	// checks of Batch.Check but fails at its upsert, after its event went in.
	taken := &service.Message{ID: "taken", SessionID: "s0", Seq: 1, Role: service.RoleUser, Status: service.MessageComplete, CreatedAt: t0}
	if err := appendOne(s, &service.Batch{SessionID: "s0", Events: []*service.Event{{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: taken}}}); err != nil {
		t.Fatal(err)
	}
	batches := make([]*service.Batch, 0, n-1)
	for _, id := range ids[1:] {
		m := &service.Message{ID: "m-" + id, SessionID: id, Seq: 1, Role: service.RoleUser, Status: service.MessageComplete, CreatedAt: t0}
		if id == "s3" {
			m.ID = "taken"
		}
		batches = append(batches, &service.Batch{SessionID: id, Events: []*service.Event{
			{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: m},
			{Seq: 2, Type: service.EventMessageChunk, At: t0, Key: "k", Delta: "x"},
		}})
	}
	errs := s.Append(context.Background(), batches)
	for i, id := range ids[1:] {
		ss, serr := s.Session(t.Context(), id)
		if serr != nil {
			t.Fatal(serr)
		}
		if id == "s3" {
			if errs[i] == nil {
				t.Errorf("the batch claiming another session's message succeeded")
			}
			if ss.LastSeq != 0 {
				t.Errorf("the failed batch left %d events behind", ss.LastSeq)
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("batch of %s failed with the bad one: %v", id, errs[i])
		}
		if ss.LastSeq != 2 {
			t.Errorf("session %s has LastSeq %d, want 2", id, ss.LastSeq)
		}
	}
	if m, err := s.Message(t.Context(), "taken"); err != nil || m.SessionID != "s0" {
		t.Errorf("message taken: %+v, %v; want it still in s0", m, err)
	}
}
