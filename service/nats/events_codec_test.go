package nats

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/talkgraph/talkgraph/service"
)

// sampleEvents is one event of each shape a batch carries, every field set that the
// shape sets.
func sampleEvents() []*service.Event {
	at := time.Date(2026, 11, 29, 10, 15, 2, 118000000, time.UTC)
	later := at.Add(time.Second)
	budget := 500
	temp := 0.5
	return []*service.Event{
		{SessionID: "s", Seq: 7, Type: service.EventMessageChunk, At: at, Key: "m1", MessageID: "m1", Delta: "four words ✓ \u00e9", Offset: 120, CoalescedFrom: 3},
		{Seq: 8, Type: service.EventMessageAdded, At: at, Message: &service.Message{ID: "m2", SessionID: "s", Role: service.RoleUser,
			Content: "hi \"there\"\n", Status: service.MessageComplete, CreatedAt: at, ParentID: "m1"}},
		{Seq: 9, Type: service.EventRunStatusChanged, At: at, Run: &service.Run{ID: "r1", SessionID: "s", UserID: "u", Status: service.RunWaitingForInput,
			Agent: "demo", Budget: service.BudgetSession, Usage: &service.Usage{InputTokens: 3, OutputTokens: 4}, CreatedAt: at, StartedAt: &later}},
		{Seq: 10, Type: service.EventQuestionAsked, At: at, Question: &service.Question{ID: "q1", RunID: "r1", SessionID: "s", Prompt: "which?",
			Choices: []string{"a", "b"}, Multiple: true, AskedAt: at, ExpiresAt: &later}},
		{Seq: 11, Type: service.EventToolApprovalRequested, At: at, ToolCall: &service.ToolCall{ID: "t1", RunID: "r1", MessageID: "m1", Name: "shell",
			Arguments: `{"command":"ls"}`, Status: service.ToolRunning, StartedAt: at}},
		{Seq: 12, Type: service.EventSessionUpdated, At: at, Session: &service.TalkSession{ID: "s", UserID: "u", Title: "t",
			Settings: service.Settings{Agent: "demo", TokenBudget: &budget, Temperature: &temp}, CreatedAt: at, UpdatedAt: at}},
		{Seq: 13, Type: service.EventBranchSelected, At: at, Branch: &service.BranchSwitch{Off: []string{"m2"}, On: []string{"m3"}}},
	}
}

// TestEventsDecodeAsEncodingJSONDoes: the followers' decoder gives the same events as
// encoding/json from what Publish sends, for every shape of event.
func TestEventsDecodeAsEncodingJSONDoes(t *testing.T) {
	data, err := json.Marshal(sampleEvents())
	if err != nil {
		t.Fatal(err)
	}
	var std, fast []*service.Event
	if err := json.Unmarshal(data, &std); err != nil {
		t.Fatal(err)
	}
	if err := jsonv1.Unmarshal(data, &fast); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(std, fast) {
		a, _ := json.Marshal(std)
		b, _ := json.Marshal(fast)
		t.Fatalf("decoded differently:\nencoding/json %s\nfollowers     %s", a, b)
	}
	if len(fast) != len(sampleEvents()) || fast[3].Question.Choices[1] != "b" || fast[0].Delta != "four words ✓ é" {
		t.Fatalf("decoded %d events: %+v", len(fast), fast)
	}
}

// BenchmarkDecodeEvents is a follower decoding a batch of one chunk event, as most are:
// encoding/json and the decoder it uses.
func BenchmarkDecodeEvents(b *testing.B) {
	data, _ := json.Marshal(sampleEvents()[:1])
	for _, c := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"encoding-json", json.Unmarshal}, {"followers", func(d []byte, v any) error { return jsonv1.Unmarshal(d, v) }}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var evs []*service.Event
				if err := c.unmarshal(data, &evs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
