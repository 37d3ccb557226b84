package agui_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/agui"
	"github.com/talkgraph/talkgraph/service"
)

const sid = "0b5b6e57-6d4e-4bd4-8a53-3b3c7b3f2d11"

// frames shows frames one a line: the event's type, the ID it names, what it says that
// tests look at, and its SSE id as "#seq" ("" for none).
func frames(t *testing.T, fs []agui.Frame) []string {
	t.Helper()
	var out []string
	for _, f := range fs {
		data, err := f.Event.ToJSON()
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type, MessageID, ToolCallID, Delta, Content string
			Outcome                                     *struct{ Type string }
		}
		_ = json.Unmarshal(data, &e)
		id := e.MessageID
		if e.ToolCallID != "" {
			id = e.ToolCallID // a result's message ID aside
		}
		line := strings.TrimSpace(strings.Join([]string{e.Type, id, e.Delta + e.Content}, " "))
		if e.Outcome != nil {
			line += " " + e.Outcome.Type
		}
		if f.ID != "" {
			c, err := service.DecodeCursor(sid, f.ID)
			if err != nil {
				t.Fatalf("the id of %s: %v", line, err)
			}
			line += " #" + string(rune('0'+c.Seq))
		}
		out = append(out, line)
	}
	return out
}

// translate feeds evs, numbered from 1, to tr, and returns the frames and the last ending.
func translate(tr *agui.Translator, evs ...*service.Event) ([]agui.Frame, agui.Ending) {
	var fs []agui.Frame
	ending := agui.Going
	for i, ev := range evs {
		ev.Seq, ev.At = int64(i+1), time.Unix(1700000000, 0)
		f, e := tr.Event(ev)
		fs, ending = append(fs, f...), e
	}
	return fs, ending
}

func want(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCallGoesOutOnceWhole: a call's start, arguments and end go out at its
// ToolCallStarted, under its cursor; the ToolApprovalRequested that follows adds nothing
// (a stream resumed between them must not send the call again).
func TestCallGoesOutOnceWhole(t *testing.T) {
	run := &service.Run{ID: "r", Status: service.RunRunning}
	call := &service.ToolCall{ID: "c", RunID: "r", MessageID: "m", Name: "echo", Arguments: `{"text":"hi"}`, Status: service.ToolAwaitingApproval}
	fs, _ := translate(agui.New("t", sid, run, "r"),
		&service.Event{Type: service.EventToolCallStarted, ToolCall: call},
		&service.Event{Type: service.EventToolApprovalRequested, ToolCall: call})
	want(t, frames(t, fs), []string{"TOOL_CALL_START c", `TOOL_CALL_ARGS c {"text":"hi"}`, "TOOL_CALL_END c #1"})

	// Resumed after the start: the request adds nothing.
	tr := agui.New("t", sid, run, "r")
	fs, _ = tr.Event(&service.Event{Seq: 2, Type: service.EventToolApprovalRequested, ToolCall: call})
	want(t, frames(t, fs), nil)
}

// TestRefusedCallHasItsResult: a call refused as it starts (DENY) gets its result with its
// start, no other event ending it.
func TestRefusedCallHasItsResult(t *testing.T) {
	why := "the session's tool policy denies this tool"
	call := &service.ToolCall{ID: "c", RunID: "r", MessageID: "m", Name: "echo", Arguments: "{}", Status: service.ToolRejected, Error: &why}
	fs, _ := translate(agui.New("t", sid, &service.Run{ID: "r", Status: service.RunRunning}, "r"),
		&service.Event{Type: service.EventToolCallStarted, ToolCall: call})
	want(t, frames(t, fs), []string{"TOOL_CALL_START c", "TOOL_CALL_ARGS c {}", "TOOL_CALL_END c", "TOOL_CALL_RESULT c " + why + " #1"})
}

// TestStartInsideAMessage: a stream resumed inside a message's text begins with
// RUN_STARTED and the message's start, both without an id, and ends the message (with the
// text it did not send) at its completion; one resumed elsewhere begins with RUN_STARTED
// only.
func TestStartInsideAMessage(t *testing.T) {
	run := &service.Run{ID: "r", Status: service.RunRunning}
	tr := agui.New("t", sid, run, "r")
	first := tr.Start("m", 3)
	done := &service.Message{ID: "m", RunID: "r", Role: service.RoleAssistant, Kind: service.KindText, Content: "abcdef"}
	fs, _ := translate(tr, &service.Event{Type: service.EventMessageCompleted, Message: done})
	want(t, frames(t, append(first, fs...)), []string{"RUN_STARTED", "TEXT_MESSAGE_START m", "TEXT_MESSAGE_CONTENT m def", "TEXT_MESSAGE_END m #1"})

	// Resumed right before the message's end: its start, then its end.
	tr = agui.New("t", sid, run, "r")
	first = tr.Start("m", 6)
	fs, _ = translate(tr, &service.Event{Type: service.EventMessageCompleted, Message: done})
	want(t, frames(t, append(first, fs...)), []string{"RUN_STARTED", "TEXT_MESSAGE_START m", "TEXT_MESSAGE_END m #1"})

	want(t, frames(t, agui.New("t", sid, run, "r").Start("", 0)), []string{"RUN_STARTED"})
}

// TestEnds: a run that waits ends its open message and finishes with an interrupt a
// pending input; one that fails ends with RUN_ERROR and why, also when the Translator
// learns it from the run it starts with (a stream resumed after the end).
func TestEnds(t *testing.T) {
	tr := agui.New("t", sid, &service.Run{ID: "r", Status: service.RunRunning}, "r")
	chunk := &service.Event{Type: service.EventMessageChunk, MessageID: "m", Delta: "hi"}
	added := &service.Event{Type: service.EventMessageAdded, Message: &service.Message{ID: "m", RunID: "r", Role: service.RoleAssistant, Kind: service.KindText}}
	waits := &service.Event{Type: service.EventRunStatusChanged, Run: &service.Run{ID: "r", Status: service.RunWaitingForInput}}
	fs, ending := translate(tr, added, chunk, waits)
	if ending != agui.Waits {
		t.Fatalf("ending %v, want Waits", ending)
	}
	expires := time.Unix(1700000600, 0)
	q := &service.Question{ID: "q", Prompt: "Your name?", ExpiresAt: &expires}
	fs = append(fs, tr.Interrupt([]*service.Question{q}, nil, tr.Cursor(waits))...)
	want(t, frames(t, fs), []string{"TEXT_MESSAGE_START m", "TEXT_MESSAGE_CONTENT m hi #2", "TEXT_MESSAGE_END m", "RUN_FINISHED interrupt #3"})

	failed := &service.Run{ID: "r", Status: service.RunFailed, Error: "the model is down"}
	data, _ := agui.New("t", sid, failed, "r").Finish("")[0].Event.ToJSON()
	if !strings.Contains(string(data), `"code":"RUN_FAILED"`) || !strings.Contains(string(data), "the model is down") {
		t.Errorf("the end of a failed run: %s", data)
	}
}
