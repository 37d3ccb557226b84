package storetest

import (
	"fmt"
	"testing"

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
