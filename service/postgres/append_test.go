package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// TestReplicasAppendAtOnce has two replicas append to the same sessions at once, each
// call writing every session in a random order: each batch is written whole or refused
// with ECONFLICT, no call deadlocks, and every log has every Seq once.
func TestReplicasAppendAtOnce(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	a, b := mustOpen(t, url, postgres.Options{}), mustOpen(t, url, postgres.Options{})
	const sessions, rounds = 20, 30
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%02d", i)
		must(t, create(a, ids[i]))
	}
	var written atomic.Int64
	var wg sync.WaitGroup
	for _, s := range []*postgres.Store{a, b} {
		wg.Go(func() {
			for range rounds {
				var batches []*service.Batch
				for _, j := range rand.Perm(sessions) {
					ss, err := s.Session(context.Background(), ids[j])
					if err != nil {
						t.Error(err)
						return
					}
					batches = append(batches, chunkBatch(ids[j], ss.LastSeq+1, "x"))
				}
				for i, err := range s.Append(context.Background(), batches) {
					switch service.ErrorCode(err) {
					case "":
						written.Add(1)
					case service.ECONFLICT:
					default:
						t.Errorf("batch %d: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for _, id := range ids {
		evs, err := a.Events(t.Context(), id, 0, 0)
		must(t, err)
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("session %s: event %d has Seq %d", id, i, e.Seq)
			}
		}
		total += int64(len(evs))
	}
	if total != written.Load() {
		t.Errorf("%d events in the logs, %d batches written", total, written.Load())
	}
	if total < sessions*rounds/2 {
		t.Errorf("only %d of %d batches written", total, 2*sessions*rounds)
	}
}

// TestAdmissionAcrossReplicas has two replicas admit runs of one user at once, with a
// limit of one: exactly one of them wins each time.
func TestAdmissionAcrossReplicas(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	a, b := mustOpen(t, url, postgres.Options{}), mustOpen(t, url, postgres.Options{})
	for _, id := range []string{"sa", "sb"} {
		must(t, create(a, id))
	}
	seq := map[string]int64{}
	for round := range 10 {
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for _, x := range []struct {
			s       *postgres.Store
			session string
		}{{a, "sa"}, {b, "sb"}} {
			run := fmt.Sprintf("r%d-%s", round, x.session)
			r := &service.Run{ID: run, SessionID: x.session, UserID: "u1", Status: service.RunRunning, Agent: "demo", CreatedAt: t0}
			batch := &service.Batch{SessionID: x.session, Admit: &service.Admission{UserID: "u1", RunID: run, Limit: 1},
				Events: []*service.Event{{Seq: seq[x.session] + 1, Type: service.EventRunStatusChanged, At: t0, Run: r}}}
			wg.Go(func() {
				err := appendOne(x.s, batch)
				mu.Lock()
				errs[x.session] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		won := 0
		for session, err := range errs {
			switch service.ErrorCode(err) {
			case "":
				won++
				seq[session]++
			case service.ERATELIMIT:
			default:
				t.Fatalf("round %d, %s: %v", round, session, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d admissions won, want 1 (%v)", round, won, errs)
		}
		// The winner's run ends, freeing the user's place.
		for session := range errs {
			if errs[session] == nil {
				run := fmt.Sprintf("r%d-%s", round, session)
				r := &service.Run{ID: run, SessionID: session, UserID: "u1", Status: service.RunCompleted, Agent: "demo", CreatedAt: t0}
				must(t, appendOne(a, &service.Batch{SessionID: session,
					Events: []*service.Event{{Seq: seq[session] + 1, Type: service.EventRunStatusChanged, At: t0, Run: r}}}))
				seq[session]++
			}
		}
	}
}

// TestOneCallManyWrites checks the cases that one call's statements must order: a
// session written twice, deleted and created again, and rows claimed by two sessions.
func TestOneCallManyWrites(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	must(t, create(s, "gone"))
	must(t, appendOne(s, chunkBatch("gone", 1, "old")))
	msg := func(id, session string, seq int64, content string) *service.Event {
		return &service.Event{Seq: seq, Type: service.EventMessageAdded, At: t0, Message: &service.Message{ID: id,
			SessionID: session, Seq: seq, Role: service.RoleAssistant, Kind: service.KindText, Content: content,
			Status: service.MessageComplete, CreatedAt: t0}}
	}
	batches := []*service.Batch{
		{SessionID: "s1", Create: newSession("s1"), Events: []*service.Event{msg("m1", "s1", 1, "first")}},
		{SessionID: "s1", Events: []*service.Event{msg("m1", "s1", 2, "second"), msg("m2", "s1", 3, "x")}},
		{SessionID: "s2", Create: newSession("s2"), Events: []*service.Event{msg("m2", "s2", 1, "not mine")}},
		{SessionID: "gone", Delete: true},
		{SessionID: "gone", Create: newSession("gone"), Events: []*service.Event{msg("g1", "gone", 1, "new")}},
		{SessionID: "s1", Events: []*service.Event{{Seq: 9, Type: service.EventMessageChunk, At: t0, Key: "m1"}}},
	}
	errs := s.Append(ctx, batches)
	for _, i := range []int{0, 1, 3, 4} {
		if errs[i] != nil {
			t.Errorf("batch %d: %v", i, errs[i])
		}
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "belongs to another session") {
		t.Errorf("batch 2, with a row of session s1: %v, want it refused", errs[2])
	}
	wantCode(t, "batch 5, with a gap", errs[5], service.ECONFLICT)
	if m, err := s.Message(ctx, "m1"); err != nil || m.Content != "second" || m.Seq != 2 {
		t.Errorf("m1 = %+v, %v; want the second snapshot", m, err)
	}
	if m, err := s.Message(ctx, "m2"); err != nil || m.SessionID != "s1" {
		t.Errorf("m2 = %+v, %v; want s1's", m, err)
	}
	if _, err := s.Session(ctx, "s2"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("the refused batch created s2: %v", err)
	}
	if got := lastSeq(t, s, "s1"); got != 3 {
		t.Errorf("s1's LastSeq = %d, want 3", got)
	}
	evs, err := s.Events(ctx, "gone", 0, 0)
	must(t, err)
	if len(evs) != 1 || evs[0].Message == nil || evs[0].Message.Content != "new" {
		t.Errorf("the recreated session's log = %+v, want its one new event", evs)
	}

	// A row of another session that is already stored fails its batch alone too.
	errs = s.Append(ctx, []*service.Batch{
		{SessionID: "gone", Events: []*service.Event{msg("m1", "gone", 2, "steal")}},
		chunkBatch("s1", 4, "ok"),
	})
	if errs[0] == nil || errs[1] != nil {
		t.Errorf("errors %v, want the first batch refused and the second written", errs)
	}
	if got := lastSeq(t, s, "gone"); got != 1 {
		t.Errorf("the refused batch moved the log to %d", got)
	}
}

// addedMessage is a MessageAdded event of a new assistant message.
func addedMessage(id, session string, seq int64, content string) *service.Event {
	return &service.Event{Seq: seq, Type: service.EventMessageAdded, At: t0, Message: &service.Message{ID: id,
		SessionID: session, Seq: seq, Role: service.RoleAssistant, Kind: service.KindText, Content: content,
		Status: service.MessageComplete, CreatedAt: t0}}
}

// TestBatchFailingInTheDatabaseFailsAlone makes the database refuse one batch's row
// (a CHECK constraint the test adds): Append cannot tell which batch of its multi-row
// statements failed, writes them again one by one to find it, and writes the others.
func TestBatchFailingInTheDatabaseFailsAlone(t *testing.T) {
	ctx := t.Context()
	url := newSchema(t, newDatabase(t))
	s := mustOpen(t, url, postgres.Options{})
	for _, id := range []string{"s1", "s2", "s3"} {
		must(t, create(s, id))
	}
	conn, err := pgx.Connect(ctx, url)
	must(t, err)
	defer conn.Close(context.Background())
	must(t, execSQL(conn, `ALTER TABLE messages ADD CONSTRAINT no_poison CHECK (content <> 'poison'::bytea)`))
	errs := s.Append(ctx, []*service.Batch{
		{SessionID: "s1", Events: []*service.Event{addedMessage("m1", "s1", 1, "fine")}},
		{SessionID: "s2", Events: []*service.Event{addedMessage("m2", "s2", 1, "poison")}},
		{SessionID: "s3", Events: []*service.Event{addedMessage("m3", "s3", 1, "fine")}},
	})
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("good batches: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "no_poison") {
		t.Errorf("the poisoned batch: %v, want the constraint's error", errs[1])
	}
	for id, want := range map[string]int64{"s1": 1, "s2": 0, "s3": 1} {
		if got := lastSeq(t, s, id); got != want {
			t.Errorf("%s: LastSeq %d, want %d", id, got, want)
		}
	}
}

// TestRowClaimedMeanwhile has another transaction insert a row of another session with
// the ID a batch writes, after Append read the state and before it writes: the upsert
// leaves the row alone, talkgraph_all_written fails the transaction, and Append, trying
// again, finds the row and refuses that batch alone.
func TestRowClaimedMeanwhile(t *testing.T) {
	ctx := t.Context()
	url := withParam(t, newSchema(t, newDatabase(t)), "application_name", "talkgraph_claimed")
	s := mustOpen(t, url, postgres.Options{})
	for _, id := range []string{"s1", "s2", "s3"} {
		must(t, create(s, id))
	}
	other, err := pgx.Connect(ctx, url)
	must(t, err)
	defer other.Close(context.Background())
	tx, err := other.Begin(ctx)
	must(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, `INSERT INTO messages (id, session_id, seq, role, kind, content, status, run_id, question_id, created_at, error)
		VALUES ('m1', 's2', 1, 'ASSISTANT', 'TEXT', 'x', 'COMPLETE', '', '', 0, '')`)
	must(t, err)

	done := make(chan []error)
	go func() {
		done <- s.Append(context.Background(), []*service.Batch{
			{SessionID: "s1", Events: []*service.Event{addedMessage("m1", "s1", 1, "mine?")}},
			{SessionID: "s3", Events: []*service.Event{addedMessage("m3", "s3", 1, "fine")}},
		})
	}()
	// Wait for the upsert to wait for the uncommitted row, then commit it.
	watch := admin(t)
	waiting := false
	for deadline := time.Now().Add(10 * time.Second); !waiting && time.Now().Before(deadline); {
		must(t, watch.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE application_name = 'talkgraph_claimed' AND wait_event_type = 'Lock'`).Scan(&waiting))
		time.Sleep(10 * time.Millisecond)
	}
	if !waiting {
		t.Fatal("Append never waited for the other transaction's row")
	}
	must(t, tx.Commit(ctx))
	errs := <-done
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "belongs to another session") {
		t.Errorf("the batch with a row of s2: %v, want it refused", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("the good batch: %v", errs[1])
	}
	if m, err := s.Message(ctx, "m1"); err != nil || m.SessionID != "s2" || m.Content != "x" {
		t.Errorf("m1 = %+v, %v; want s2's row untouched", m, err)
	}
	if got := lastSeq(t, s, "s1"); got != 0 {
		t.Errorf("the refused batch moved s1's log to %d", got)
	}
}
