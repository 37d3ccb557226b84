package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// BenchmarkAppend measures what streaming costs a Store: each round appends one
// MessageChunk event to each of sessions sessions in one Append, as the service's writer
// does when many replies stream at once. ns/op is per round; the custom metric is per
// chunk.
func BenchmarkAppend(b *testing.B, s service.Store, sessions int) {
	logs := make([]*log, sessions)
	for i := range logs {
		id := fmt.Sprintf("s%04d", i)
		logs[i] = create(b, s, newSession(id, "u1", t0))
		logs[i].append(added(newMessage("m"+id, id)))
	}
	batches := make([]*service.Batch, sessions)
	offset := 0
	b.ReportAllocs()
	for b.Loop() {
		for i, l := range logs {
			batches[i] = l.batch(chunk("m"+l.id, "word ", offset))
		}
		mustAppend(b, s, batches...)
		for _, l := range logs {
			l.last++
		}
		offset += 5
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sessions), "ns/chunk")
}

// BenchmarkTurns measures what a burst of messages costs a Store: each round writes, for
// each of sessions sessions in one Append, what addMessage writes (the user's message,
// its run QUEUED and then RUNNING, the session's automatic title, an idempotency key) and
// what the run's first round writes (the reply's MessageAdded and its first chunk). ns/op
// is per round; the custom metric is per session.
func BenchmarkTurns(b *testing.B, s service.Store, sessions int) {
	logs := make([]*log, sessions)
	for i := range logs {
		id := fmt.Sprintf("s%04d", i)
		sess := newSession(id, fmt.Sprintf("u%04d", i), t0)
		logs[i] = create(b, s, sess)
	}
	batches := make([]*service.Batch, 0, 2*sessions)
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		batches = batches[:0]
		for i, l := range logs {
			id := fmt.Sprintf("%s-%d", l.id, round)
			user := newMessage("m"+id, l.id)
			user.Role, user.RunID = service.RoleUser, "r"+id
			run := newRun("r"+id, l.id, service.RunQueued, t0)
			run.UserID = fmt.Sprintf("u%04d", i)
			running := *run
			running.Status = service.RunRunning
			titled := newSession(l.id, run.UserID, at(time.Second))
			titled.Title = "turn " + id
			turn := l.batch(added(user), runChanged(run), runChanged(&running),
				&service.Event{Type: service.EventSessionUpdated, At: t0, Session: titled})
			turn.Idempotency = &service.IdempotencyRecord{UserID: run.UserID, Key: "k" + id, SessionID: l.id,
				MessageID: user.ID, RunID: run.ID, CreatedAt: t0}
			l.last += int64(len(turn.Events))
			reply := newMessage("a"+id, l.id)
			reply.Status, reply.Content, reply.RunID = service.MessageStreaming, "", run.ID
			first := l.batch(added(reply), chunk(reply.ID, "Hello ", 0))
			l.last += int64(len(first.Events))
			batches = append(batches, turn, first)
		}
		mustAppend(b, s, batches...)
		round++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sessions), "ns/session")
}

// BenchmarkCompact measures what folding finished replies costs a Store: each op folds
// the chunks of one finished reply in each of sessions sessions (chunks chunk events
// each) in one Compact, as the service's compactor does when replies end together. ns/op
// is per Compact; the custom metric is per reply.
func BenchmarkCompact(b *testing.B, s service.Store, sessions, chunks int) {
	logs := make([]*log, sessions)
	for i := range logs {
		id := fmt.Sprintf("s%04d", i)
		logs[i] = create(b, s, newSession(id, fmt.Sprintf("u%04d", i), t0))
	}
	batches := make([]*service.Batch, sessions)
	cs := make([]service.Compaction, sessions)
	b.ReportAllocs()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		for i, l := range logs {
			m := newMessage(fmt.Sprintf("m%d-%d", i, n), l.id)
			evs := []*service.Event{added(m)}
			for k := range chunks {
				evs = append(evs, chunk(m.ID, "word ", 5*k))
			}
			batches[i] = l.batch(append(evs, completed(m))...)
			cs[i] = service.Compaction{SessionID: l.id, Key: m.ID, FromSeq: l.last + 2}
			l.last += int64(len(batches[i].Events))
		}
		mustAppend(b, s, batches...)
		b.StartTimer()
		if err := s.Compact(b.Context(), cs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sessions), "ns/reply")
}
