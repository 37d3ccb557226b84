package service_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func msgEv(typ service.EventType, id string, role service.Role, status service.MessageStatus, when time.Time) *service.Event {
	return &service.Event{Type: typ, At: when, Message: &service.Message{ID: id, SessionID: "s", Role: role, Status: status}}
}

func runEv(id string, status service.RunStatus) *service.Event {
	return &service.Event{Type: service.EventRunStatusChanged, Run: &service.Run{ID: id, SessionID: "s", Status: status}}
}

func qEv(typ service.EventType, id string, answer *string) *service.Event {
	return &service.Event{Type: typ, Question: &service.Question{ID: id, SessionID: "s", Answer: answer}}
}

func toolEv(typ service.EventType, id string, status service.ToolCallStatus) *service.Event {
	return &service.Event{Type: typ, ToolCall: &service.ToolCall{ID: id, SessionID: "s", Status: status}}
}

func chunkEv(typ service.EventType, seq int64, key, delta string, offset int) *service.Event {
	return &service.Event{SessionID: "s", Seq: seq, Type: typ, Key: key, MessageID: "m", Delta: delta, Offset: offset, At: at(int(seq))}
}

// snapshot copies events deeply, to see later that nothing changed them.
func snapshot(t *testing.T, evs []*service.Event) string {
	t.Helper()
	b, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDerive(t *testing.T) {
	userAdded := msgEv(service.EventMessageAdded, "m1", service.RoleUser, service.MessageComplete, at(1))
	answerAdded := msgEv(service.EventMessageAdded, "m3", service.RoleUser, service.MessageComplete, at(3))
	answerAdded.Message.Kind = service.KindAnswer
	replyAdded := msgEv(service.EventMessageAdded, "m2", service.RoleAssistant, service.MessageStreaming, at(2))
	replyDone := msgEv(service.EventMessageCompleted, "m2", service.RoleAssistant, service.MessageComplete, at(4))
	queued, running, waiting, done := runEv("r1", service.RunQueued), runEv("r1", service.RunRunning), runEv("r1", service.RunWaitingForInput), runEv("r1", service.RunCompleted)
	cancelled, interrupted, failed := runEv("r2", service.RunCancelled), runEv("r3", service.RunInterrupted), runEv("r4", service.RunFailed)
	asked, answered := qEv(service.EventQuestionAsked, "q1", nil), qEv(service.EventQuestionAnswered, "q1", ptr("yes"))
	started, finished := toolEv(service.EventToolCallStarted, "t1", service.ToolRunning), toolEv(service.EventToolCallFinished, "t1", service.ToolCompleted)
	s1 := &service.TalkSession{ID: "s", Title: "one"}
	s2 := &service.TalkSession{ID: "s", Title: "two"}
	upd1 := &service.Event{Type: service.EventSessionUpdated, Session: s1}
	upd2 := &service.Event{Type: service.EventSessionUpdated, Session: s2}
	switched := func(off, on []string) *service.Event {
		return &service.Event{Type: service.EventBranchSelected, Branch: &service.BranchSwitch{Off: off, On: on}}
	}

	for _, tc := range []struct {
		name   string
		events []*service.Event
		want   service.Changes
	}{
		{"no events change nothing", nil, service.Changes{}},
		{"chunk events change no row", []*service.Event{
			chunkEv(service.EventMessageChunk, 1, "m2", "hi", 0), chunkEv(service.EventToolCallOutput, 2, "t1", "out", 0),
		}, service.Changes{}},
		{"a message row is its last snapshot, in the order rows first appear", []*service.Event{userAdded, replyAdded, replyDone},
			service.Changes{Activity: at(1), Messages: []*service.Message{userAdded.Message, replyDone.Message}, Unread: ptr(true)}},
		{"a run row is its last snapshot; a final status ends it", []*service.Event{queued, running, waiting, done},
			service.Changes{Runs: []*service.Run{done.Run}, EndedRuns: []string{"r1"}}},
		{"a run that is not final has not ended", []*service.Event{queued, running},
			service.Changes{Runs: []*service.Run{running.Run}}},
		{"CANCELLED, INTERRUPTED and FAILED runs end too, in order", []*service.Event{failed, cancelled, interrupted},
			service.Changes{Runs: []*service.Run{failed.Run, cancelled.Run, interrupted.Run}, EndedRuns: []string{"r4", "r2", "r3"}}},
		{"a question row is its last snapshot", []*service.Event{asked, answered},
			service.Changes{Questions: []*service.Question{answered.Question}, Unread: ptr(true)}},
		{"a tool call row is its last snapshot", []*service.Event{started, finished},
			service.Changes{ToolCalls: []*service.ToolCall{finished.ToolCall}}},
		{"the session is the last SessionUpdated snapshot", []*service.Event{upd1, upd2},
			service.Changes{Session: s2, Bytes: s1.Size() + s2.Size()}},
		{"activity is the time of the latest user message or answer", []*service.Event{userAdded, replyAdded, answerAdded, replyDone},
			service.Changes{Activity: at(3), Messages: []*service.Message{userAdded.Message, replyDone.Message, answerAdded.Message}, Unread: ptr(true)}},
		{"an assistant message is no activity", []*service.Event{replyAdded},
			service.Changes{Messages: []*service.Message{replyAdded.Message}}},
		{"events without their payload change nothing", []*service.Event{
			{Type: service.EventMessageAdded}, {Type: service.EventRunStatusChanged}, {Type: service.EventQuestionAsked},
			{Type: service.EventToolCallStarted}, {Type: service.EventSessionUpdated}, {Type: service.EventBranchSelected},
		}, service.Changes{}},
		{"switches net out: the last of each message holds, Off before On in one event, in the order first named",
			[]*service.Event{switched([]string{"a"}, []string{"b"}), switched(nil, []string{"c"}), switched([]string{"c"}, []string{"a"}),
				switched([]string{"d"}, []string{"b", "d"})},
			service.Changes{Switches: service.BranchSwitch{Off: []string{"c"}, On: []string{"a", "b", "d"}}}},
		{"everything at once", []*service.Event{upd1, userAdded, queued, running, replyAdded, started, asked, waiting, answerAdded, answered, finished, replyDone, done},
			service.Changes{Session: s1, Activity: at(3), Bytes: s1.Size() + int64(len(userAdded.Message.Content)+len(answerAdded.Message.Content)),
				Messages:  []*service.Message{userAdded.Message, replyDone.Message, answerAdded.Message},
				Runs:      []*service.Run{done.Run},
				Questions: []*service.Question{answered.Question},
				ToolCalls: []*service.ToolCall{finished.ToolCall},
				EndedRuns: []string{"r1"},
				Unread:    ptr(true)}},
		{"a completed or failed reply and a question asked leave the session unread; a SessionRead does not",
			[]*service.Event{replyDone, {Type: service.EventSessionRead}},
			service.Changes{Messages: []*service.Message{replyDone.Message}, Unread: ptr(false)}},
		{"an interrupted reply leaves the session as it was",
			[]*service.Event{msgEv(service.EventMessageCompleted, "m2", service.RoleAssistant, service.MessageInterrupted, at(4))},
			service.Changes{Messages: []*service.Message{{ID: "m2", SessionID: "s", Role: service.RoleAssistant, Status: service.MessageInterrupted}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, tc.events)
			got := service.Derive(tc.events)
			if !reflect.DeepEqual(got, tc.want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(tc.want)
				t.Errorf("Derive:\n got %s\nwant %s", gj, wj)
			}
			if snapshot(t, tc.events) != before {
				t.Error("Derive changed its events")
			}
			if again := service.Derive(tc.events); !reflect.DeepEqual(again, got) {
				t.Error("Derive is not a function of its events")
			}
		})
	}
}

func TestChangesOnBranch(t *testing.T) {
	msgs := func() []*service.Message {
		return []*service.Message{{ID: "m1"}, {ID: "m2", OffBranch: true}, {ID: "m3"}, {ID: "m4", OffBranch: true}}
	}
	for _, tc := range []struct {
		name     string
		switches service.BranchSwitch
		want     []string
	}{
		{"without switches, as the snapshots say", service.BranchSwitch{}, []string{"m1", "m3"}},
		{"then as the switches move them", service.BranchSwitch{Off: []string{"m1", "x"}, On: []string{"m2", "y"}}, []string{"m2", "m3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := service.Changes{Messages: msgs(), Switches: tc.switches}
			var got []string
			for _, m := range c.OnBranch() {
				got = append(got, m.ID)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("OnBranch = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCoalesce(t *testing.T) {
	msg := func(seq int64, delta string, off int) *service.Event {
		return chunkEv(service.EventMessageChunk, seq, "k", delta, off)
	}
	other := func(seq int64) *service.Event {
		return &service.Event{SessionID: "s", Seq: seq, Type: service.EventRunStatusChanged, Run: &service.Run{ID: "r"}}
	}
	folded := func(last *service.Event, delta string, off int, from int64) *service.Event {
		f := *last
		f.Delta, f.Offset, f.CoalescedFrom = delta, off, from
		return &f
	}
	prev := msg(3, "abc", 0)
	prev.CoalescedFrom = 1

	for _, tc := range []struct {
		name   string
		events []*service.Event
		key    string
		folded []*service.Event
		drop   []int64
	}{
		{"nothing to fold in no events", nil, "k", nil, nil},
		{"a single chunk stays as it is", []*service.Event{msg(1, "a", 0)}, "k", nil, nil},
		{"an unbroken run becomes one event at the Seq of its last, with all the text from the first's offset",
			[]*service.Event{msg(4, "ab", 7), msg(5, "c", 9), msg(6, "dé", 10)}, "k",
			[]*service.Event{folded(msg(6, "dé", 10), "abcdé", 7, 4)}, []int64{4, 5}},
		{"another event breaks a run",
			[]*service.Event{msg(1, "a", 0), msg(2, "b", 1), other(3), msg(4, "c", 2), msg(5, "d", 3)}, "k",
			[]*service.Event{folded(msg(2, "b", 1), "ab", 0, 1), folded(msg(5, "d", 3), "cd", 2, 4)}, []int64{1, 4}},
		{"a chunk of another stream breaks a run and is left alone",
			[]*service.Event{msg(1, "a", 0), msg(2, "b", 1), chunkEv(service.EventMessageChunk, 3, "x", "z", 0), msg(4, "c", 2)}, "k",
			[]*service.Event{folded(msg(2, "b", 1), "ab", 0, 1)}, []int64{1}},
		{"only the stream named folds",
			[]*service.Event{msg(1, "a", 0), msg(2, "b", 1)}, "x", nil, nil},
		{"a run that starts with a folded event keeps where that one began",
			[]*service.Event{prev, msg(4, "d", 3)}, "k",
			[]*service.Event{folded(msg(4, "d", 3), "abcd", 0, 1)}, []int64{3}},
		{"a tool's output folds the same way",
			[]*service.Event{chunkEv(service.EventToolCallOutput, 1, "t", "o", 0), chunkEv(service.EventToolCallOutput, 2, "t", "ut", 1)}, "t",
			[]*service.Event{folded(chunkEv(service.EventToolCallOutput, 2, "t", "ut", 1), "out", 0, 1)}, []int64{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, tc.events)
			gotFolded, gotDrop := service.Coalesce(tc.events, tc.key)
			if !reflect.DeepEqual(gotFolded, tc.folded) {
				gj, _ := json.Marshal(gotFolded)
				wj, _ := json.Marshal(tc.folded)
				t.Errorf("folded:\n got %s\nwant %s", gj, wj)
			}
			if !reflect.DeepEqual(gotDrop, tc.drop) {
				t.Errorf("drop %v, want %v", gotDrop, tc.drop)
			}
			if snapshot(t, tc.events) != before {
				t.Error("Coalesce changed its events")
			}
		})
	}
}

func TestBatchCheck(t *testing.T) {
	ev := func(seq int64) *service.Event {
		return &service.Event{Seq: seq, Type: service.EventSessionUpdated, Session: &service.TalkSession{ID: "s"}}
	}
	rec := &service.IdempotencyRecord{UserID: "u", Key: "k", SessionID: "s"}
	rowEvent := func(e *service.Event) []*service.Event { e.Seq = 1; return []*service.Event{e} }

	valid := []struct {
		name string
		b    *service.Batch
	}{
		{"a creation", &service.Batch{SessionID: "s", Create: &service.TalkSession{ID: "s"}}},
		{"a creation with its first events and a record", &service.Batch{SessionID: "s", Create: &service.TalkSession{ID: "s"}, Events: []*service.Event{ev(1), ev(2)}, Idempotency: rec}},
		{"a deletion alone", &service.Batch{SessionID: "s", Delete: true}},
		{"events that go on a log", &service.Batch{SessionID: "s", Events: []*service.Event{ev(7), ev(8), ev(9)}}},
		{"events with their session's ID", &service.Batch{SessionID: "s", Events: []*service.Event{{SessionID: "s", Seq: 1, Type: service.EventMessageChunk}}}},
		{"rows of the batch's session", &service.Batch{SessionID: "s", Events: []*service.Event{
			{Seq: 1, Type: service.EventMessageAdded, Message: &service.Message{ID: "m", SessionID: "s"}},
			{Seq: 2, Type: service.EventRunStatusChanged, Run: &service.Run{ID: "r", SessionID: "s"}},
			{Seq: 3, Type: service.EventQuestionAsked, Question: &service.Question{ID: "q", SessionID: "s"}},
			{Seq: 4, Type: service.EventToolCallStarted, ToolCall: &service.ToolCall{ID: "t", SessionID: "s"}},
		}}},
		{"nothing at all", &service.Batch{SessionID: "s"}},
	}
	for _, tc := range valid {
		t.Run("valid: "+tc.name, func(t *testing.T) {
			if err := tc.b.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}

	invalid := []struct {
		name string
		b    *service.Batch
	}{
		{"a nil batch", nil},
		{"a missing session ID", &service.Batch{Events: []*service.Event{ev(1)}}},
		{"a creation of another session", &service.Batch{SessionID: "s", Create: &service.TalkSession{ID: "other"}}},
		{"a deletion that creates", &service.Batch{SessionID: "s", Delete: true, Create: &service.TalkSession{ID: "s"}}},
		{"a deletion that appends", &service.Batch{SessionID: "s", Delete: true, Events: []*service.Event{ev(1)}}},
		{"a deletion with a record", &service.Batch{SessionID: "s", Delete: true, Idempotency: rec}},
		{"a nil event", &service.Batch{SessionID: "s", Events: []*service.Event{nil}}},
		{"an event of another session", &service.Batch{SessionID: "s", Events: []*service.Event{{SessionID: "x", Seq: 1}}}},
		{"a Seq of 0", &service.Batch{SessionID: "s", Events: []*service.Event{ev(0)}}},
		{"a negative Seq", &service.Batch{SessionID: "s", Events: []*service.Event{ev(-1)}}},
		{"Seqs with a gap", &service.Batch{SessionID: "s", Events: []*service.Event{ev(1), ev(3)}}},
		{"Seqs out of order", &service.Batch{SessionID: "s", Events: []*service.Event{ev(2), ev(1)}}},
		{"a repeated Seq", &service.Batch{SessionID: "s", Events: []*service.Event{ev(1), ev(1)}}},
		{"a new log that does not start at 1", &service.Batch{SessionID: "s", Create: &service.TalkSession{ID: "s"}, Events: []*service.Event{ev(2)}}},
		{"a record without a user", &service.Batch{SessionID: "s", Events: []*service.Event{ev(1)}, Idempotency: &service.IdempotencyRecord{Key: "k", SessionID: "s"}}},
		{"a record without a key", &service.Batch{SessionID: "s", Events: []*service.Event{ev(1)}, Idempotency: &service.IdempotencyRecord{UserID: "u", SessionID: "s"}}},
		{"a record of another session", &service.Batch{SessionID: "s", Events: []*service.Event{ev(1)}, Idempotency: &service.IdempotencyRecord{UserID: "u", Key: "k", SessionID: "x"}}},
		{"a record without events", &service.Batch{SessionID: "s", Idempotency: rec}},
		{"a message without an ID", &service.Batch{SessionID: "s", Events: rowEvent(&service.Event{Type: service.EventMessageAdded, Message: &service.Message{SessionID: "s"}})}},
		{"a message of another session", &service.Batch{SessionID: "s", Events: rowEvent(&service.Event{Type: service.EventMessageCompleted, Message: &service.Message{ID: "m", SessionID: "x"}})}},
		{"a run of another session", &service.Batch{SessionID: "s", Events: rowEvent(&service.Event{Type: service.EventRunStatusChanged, Run: &service.Run{ID: "r", SessionID: "x"}})}},
		{"a question of another session", &service.Batch{SessionID: "s", Events: rowEvent(&service.Event{Type: service.EventQuestionAnswered, Question: &service.Question{ID: "q"}})}},
		{"a tool call of another session", &service.Batch{SessionID: "s", Events: rowEvent(&service.Event{Type: service.EventToolCallFinished, ToolCall: &service.ToolCall{ID: "t", SessionID: "x"}})}},
	}
	for _, tc := range invalid {
		t.Run("invalid: "+tc.name, func(t *testing.T) {
			err := tc.b.Check()
			if err == nil {
				t.Fatal("Check accepted it")
			}
			if !strings.HasPrefix(err.Error(), "batch: ") {
				t.Errorf("error %q does not say it is about a batch", err)
			}
		})
	}
}

func TestBatchEmptyAndPrevSeq(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     service.Batch
		empty bool
		prev  int64
	}{
		{"nothing", service.Batch{SessionID: "s"}, true, 0},
		{"a creation", service.Batch{SessionID: "s", Create: &service.TalkSession{ID: "s"}}, false, 0},
		{"a deletion", service.Batch{SessionID: "s", Delete: true}, false, 0},
		{"a record", service.Batch{SessionID: "s", Idempotency: &service.IdempotencyRecord{}}, false, 0},
		{"events from 5", service.Batch{SessionID: "s", Events: []*service.Event{{Seq: 5}, {Seq: 6}}}, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Empty(); got != tc.empty {
				t.Errorf("Empty() = %v, want %v", got, tc.empty)
			}
			if got := tc.b.PrevSeq(); got != tc.prev {
				t.Errorf("PrevSeq() = %d, want %d", got, tc.prev)
			}
		})
	}
}
