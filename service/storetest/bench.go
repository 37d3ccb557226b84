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
// one finished reply in each of sessions sessions in one Compact, as the service's
// compactor does when replies end together. The replies were streamed together, a chunk
// of each session's in every Append, so that their events interleave in the log as they
// do on a busy server. With prepared, each Compaction carries the folding made from the
// events as written, as the service gives it when it holds them in memory. ns/op is per
// Compact; the custom metric is per reply.
func BenchmarkCompact(b *testing.B, s service.Store, sessions, chunks int, prepared bool) {
	logs := make([]*log, sessions)
	for i := range logs {
		id := fmt.Sprintf("s%04d", i)
		logs[i] = create(b, s, newSession(id, fmt.Sprintf("u%04d", i), t0))
	}
	batches := make([]*service.Batch, sessions)
	msgs := make([]*service.Message, sessions)
	written := make([][]*service.Event, sessions)
	cs := make([]service.Compaction, sessions)
	appendEach := func(ev func(i int) *service.Event) {
		for i, l := range logs {
			e := ev(i)
			batches[i] = l.batch(e)
			written[i] = append(written[i], e)
			l.last++
		}
		mustAppend(b, s, batches...)
	}
	b.ReportAllocs()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		appendEach(func(i int) *service.Event {
			msgs[i] = newMessage(fmt.Sprintf("m%d-%d", i, n), logs[i].id)
			cs[i] = service.Compaction{SessionID: logs[i].id, Key: msgs[i].ID, FromSeq: logs[i].last + 2}
			written[i] = written[i][:0]
			return added(msgs[i])
		})
		for k := range chunks {
			appendEach(func(i int) *service.Event { return chunk(msgs[i].ID, "word ", 5*k) })
		}
		appendEach(func(i int) *service.Event { return completed(msgs[i]) })
		if prepared {
			for i := range cs {
				cs[i].Folded, _ = service.Coalesce(written[i][1:], cs[i].Key)
				cs[i].Prepared = true
			}
		}
		b.StartTimer()
		if err := s.Compact(b.Context(), cs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sessions), "ns/reply")
}
