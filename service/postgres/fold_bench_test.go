package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// BenchmarkFoldPrepared measures folding finished replies the service prepared (Compact
// with Prepared foldings, as a replica folds from its tail): 50 replies of 48 chunks,
// folded in one call, beside a log of `log` other events. A fold touches each reply's
// events by key, so its time should not grow with the rest of the log. ns/op is per call.
func BenchmarkFoldPrepared(b *testing.B) {
	const replies, chunks = 50, 48
	db := newDatabase(b)
	for _, others := range []int{0, 200_000} {
		b.Run(fmt.Sprintf("log=%d", others), func(b *testing.B) {
			url := newSchema(b, db)
			s := mustOpen(b, url, postgres.Options{})
			must(b, create(s, "other"))
			conn, err := pgx.Connect(b.Context(), url)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(b.Context(), `INSERT INTO events (session_id, seq, type, at, key, message_id, delta,
				delta_offset, coalesced_from) SELECT 'other', g, $1, 0, 'm', 'm', '\x776f726420'::bytea, 0, 0
				FROM generate_series(1, $2::int) AS g`, string(service.EventMessageChunk), others); err != nil {
				b.Fatal(err)
			}
			ids := make([]string, replies)
			for i := range ids {
				ids[i] = fmt.Sprintf("r%02d", i)
				must(b, create(s, ids[i]))
			}
			next := int64(1) // every reply's log is as long as the others'
			batches := make([]*service.Batch, replies)
			cs := make([]service.Compaction, replies)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				first := next
				for i, id := range ids {
					evs := make([]*service.Event, chunks)
					for j := range evs {
						evs[j] = &service.Event{Seq: first + int64(j), Type: service.EventMessageChunk, At: t0,
							Key: "m", MessageID: "m", Delta: "word ", Offset: 5 * j}
					}
					batches[i] = &service.Batch{SessionID: id, Events: evs}
					last := first + chunks - 1
					cs[i] = service.Compaction{SessionID: id, Key: "m", FromSeq: first, Prepared: true,
						Folded: []*service.Event{{Seq: last, Type: service.EventMessageChunk, At: t0, Key: "m",
							MessageID: "m", Delta: strings.Repeat("word ", chunks), CoalescedFrom: first}}}
				}
				for i, err := range s.Append(b.Context(), batches) {
					if err != nil {
						b.Fatalf("append to %s: %v", ids[i], err)
					}
				}
				next += chunks
				b.StartTimer()
				must(b, s.Compact(b.Context(), cs))
			}
		})
	}
}
