package graph

import (
	"bytes"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// benchPlan is a plan of the given fields of typ, with no plan for the objects they hold.
func benchPlan(typ string, names ...string) *plan {
	p := &plan{subs: make([]*plan, len(names))}
	for _, n := range names {
		p.keys = append(p.keys, jsonKey(n))
		p.writes = append(p.writes, renderable[typ].fields[n].write)
	}
	return p
}

// BenchmarkRenderChunk renders a text chunk as the load generator's subscription selects
// it: what each word of a reply costs the fast renderer (see plan).
func BenchmarkRenderChunk(b *testing.B) {
	p := benchPlan("MessageChunk", "__typename", "cursor", "messageId", "delta", "offset")
	ev := &model.MessageChunk{Cursor: "c2Vzc2lvbi0xOjQy", At: time.Now(), MessageID: "6f181754-3957-4654-a4d5-a74117c119ae", Delta: "word ", Offset: 120}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		p.write(&buf, ev)
	}
}

// BenchmarkRenderRunStatus renders a run's status change with every field of the run.
func BenchmarkRenderRunStatus(b *testing.B) {
	run := benchPlan("Run", "__typename", "id", "sessionId", "status", "error", "agent", "createdAt", "startedAt", "finishedAt")
	p := benchPlan("RunStatusChanged", "__typename", "cursor", "at", "run")
	p.subs[3] = run
	now := time.Now()
	ev := &model.RunStatusChanged{Cursor: "c2Vzc2lvbi0xOjQy", At: now, Run: &service.Run{ID: "r1", SessionID: "s1", Status: service.RunCompleted, Agent: "demo", CreatedAt: now, StartedAt: &now, FinishedAt: &now}}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		p.write(&buf, ev)
	}
}
