package agui

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"
	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/talkgraph/talkgraph/service"
)

// Frame is one AG-UI event as it goes out, with its SSE id: the cursor of the log event it
// comes from, "" for an event that stands for no log event of its own (a message's start
// repeated when a stream resumes inside it, the end of a message still open when the run
// waits, a start that the first chunk brings).
type Frame struct {
	Event events.Event
	ID    string
}

// Ending is what a log event means for the AG-UI run a Translator follows.
type Ending int

const (
	Going Ending = iota // nothing: the run goes on
	Waits               // the run waits for input: Interrupt, if it still does
	Ended               // the run ended: Finish
)

// Translator renders the log of one session as the AG-UI events of one of its runs: the
// run's text messages (started by their first text, so that a message holding only tool
// calls is none), its tool calls (start, arguments and end at once, the arguments being
// whole when a call starts; the result when it ends, or with its start for a call
// refused as it starts), and its end. Events of other runs,
// the user's messages (the client has its own) and the agent's questions (they are
// interrupts) are left out. A Translator is used by one goroutine.
type Translator struct {
	threadID, sessionID, runID string
	status                     service.RunStatus
	runErr                     string
	active                     string            // the run that streams now, for text of messages added before the stream began
	runOf                      map[string]string // message → run
	open                       map[string]bool   // text messages started and not ended
	sent                       map[string]int    // code points of a message's text known to be sent, where known
	calls                      map[string]bool   // tool calls whose start went out
}

// New returns a Translator of run (as it stands where the stream begins: its ID, status
// and error) of session sessionID, for the client's thread threadID. active is the
// session's running run there ("" for none).
func New(threadID, sessionID string, run *service.Run, active string) *Translator {
	return &Translator{
		threadID: threadID, sessionID: sessionID, runID: run.ID, status: run.Status, runErr: run.Error, active: active,
		runOf: map[string]string{}, open: map[string]bool{}, sent: map[string]int{}, calls: map[string]bool{},
	}
}

// RunID is the run the Translator follows.
func (t *Translator) RunID() string { return t.runID }

// Status is the run's status as of the last event translated.
func (t *Translator) Status() service.RunStatus { return t.status }

// Start returns what a response begins with: RUN_STARTED, and, for a stream that resumes
// inside a message's text (inside: its ID, the text sent of it so far, see
// service.StreamPoint), that message's start. No stream resumes inside a tool call: a
// call goes out whole, under one cursor.
func (t *Translator) Start(inside string, sent int) []Frame {
	fs := []Frame{{Event: events.NewRunStartedEvent(t.threadID, t.runID)}}
	if inside != "" {
		t.runOf[inside], t.sent[inside] = t.runID, sent
		fs = append(fs, t.startText(inside, time.Now()))
	}
	return fs
}

// Event translates one event of the session's log, read in order.
func (t *Translator) Event(ev *service.Event) ([]Frame, Ending) {
	var fs []Frame
	ending := Going
	switch ev.Type {
	case service.EventMessageAdded:
		m := ev.Message
		if m == nil || m.Role != service.RoleAssistant || m.Kind != service.KindText {
			break
		}
		t.runOf[m.ID] = m.RunID
		if m.RunID == t.runID {
			t.sent[m.ID] = 0
			if m.Content != "" {
				fs = append(fs, t.text(m.ID, m.Content, ev.At)...)
				t.sent[m.ID] = utf8.RuneCountInString(m.Content)
			}
		}
	case service.EventMessageChunk:
		run, ok := t.runOf[ev.MessageID]
		if !ok { // added before the stream began: the running run's
			run = t.active
			t.runOf[ev.MessageID] = run
		}
		if run != t.runID || ev.Delta == "" {
			break
		}
		fs = append(fs, t.text(ev.MessageID, ev.Delta, ev.At)...)
		if n, known := t.sent[ev.MessageID]; known {
			t.sent[ev.MessageID] = max(n, ev.Offset+utf8.RuneCountInString(ev.Delta))
		}
	case service.EventMessageCompleted:
		m := ev.Message
		if m == nil || m.RunID != t.runID || m.Role != service.RoleAssistant || m.Kind != service.KindText {
			break
		}
		if n, known := t.sent[m.ID]; known {
			if rest := skipRunes(m.Content, n); rest != "" {
				fs = append(fs, t.text(m.ID, rest, ev.At)...)
			}
		}
		if t.open[m.ID] {
			delete(t.open, m.ID)
			fs = append(fs, Frame{Event: stamp(events.NewTextMessageEndEvent(m.ID), ev.At)})
		}
	case service.EventToolCallStarted:
		// Every call starts so, one awaiting approval too (its ToolApprovalRequested, which
		// follows, adds nothing): a call goes out once, whole, under the one cursor.
		if c := ev.ToolCall; c != nil && c.RunID == t.runID && !t.calls[c.ID] {
			t.calls[c.ID] = true
			fs = append(fs, Frame{Event: stamp(events.NewToolCallStartEvent(c.ID, c.Name, events.WithParentMessageID(c.MessageID)), ev.At)})
			if c.Arguments != "" {
				fs = append(fs, Frame{Event: stamp(events.NewToolCallArgsEvent(c.ID, c.Arguments), ev.At)})
			}
			fs = append(fs, Frame{Event: stamp(events.NewToolCallEndEvent(c.ID), ev.At)})
			if c.Status != service.ToolRunning && c.Status != service.ToolAwaitingApproval {
				// Refused as it started (its tool's policy is DENY): no other event ends it.
				fs = append(fs, t.result(c, ev.At))
			}
		}
	case service.EventToolCallFinished, service.EventToolApprovalDecided:
		c := ev.ToolCall
		if c == nil || c.RunID != t.runID || (ev.Type == service.EventToolApprovalDecided && c.Status != service.ToolRejected) {
			break
		}
		fs = append(fs, t.result(c, ev.At))
	case service.EventRunStatusChanged:
		r := ev.Run
		if r == nil {
			break
		}
		if r.Status == service.RunRunning {
			t.active = r.ID
		}
		if r.ID != t.runID {
			break
		}
		t.status, t.runErr = r.Status, r.Error
		switch r.Status {
		case service.RunWaitingForInput:
			ending = Waits
		case service.RunCompleted, service.RunCancelled, service.RunInterrupted, service.RunFailed:
			ending = Ended
		}
	}
	if len(fs) > 0 {
		fs[len(fs)-1].ID = t.Cursor(ev)
	}
	return fs, ending
}

// Cursor is the SSE id of the frames of ev: its cursor.
func (t *Translator) Cursor(ev *service.Event) string {
	return service.EncodeCursor(t.sessionID, service.CursorOf(ev))
}

// result returns the frame of a call's result.
func (t *Translator) result(c *service.ToolCall, at time.Time) Frame {
	return Frame{Event: stamp(events.NewToolCallResultEvent(c.ID+"-result", c.ID, resultOf(c)), at)}
}

// text returns the frames of a message's text: its start first, when it is not open.
func (t *Translator) text(id, delta string, at time.Time) []Frame {
	var fs []Frame
	if !t.open[id] {
		fs = append(fs, t.startText(id, at))
	}
	return append(fs, Frame{Event: stamp(events.NewTextMessageContentEvent(id, delta), at)})
}

func (t *Translator) startText(id string, at time.Time) Frame {
	t.open[id] = true
	return Frame{Event: stamp(events.NewTextMessageStartEvent(id, events.WithRole("assistant")), at)}
}

// closeOpen ends the messages still open, in a set order: a run that waits or fails
// may leave its message unfinished, and AG-UI ends no run inside a message.
func (t *Translator) closeOpen() []Frame {
	ids := make([]string, 0, len(t.open))
	for id := range t.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fs := make([]Frame, 0, len(ids))
	for _, id := range ids {
		fs = append(fs, Frame{Event: events.NewTextMessageEndEvent(id)})
	}
	clear(t.open)
	return fs
}

// Finish returns the end of a run that ended (its status as translated): RUN_FINISHED
// (success; cancelled for a run stopped or interrupted by a newer message), or RUN_ERROR
// for one that failed; id is the last frame's.
func (t *Translator) Finish(id string) []Frame {
	fs := t.closeOpen()
	var last events.Event
	switch t.status {
	case service.RunFailed:
		msg := t.runErr
		if msg == "" {
			msg = "the run failed"
		}
		last = events.NewRunErrorEvent(msg, events.WithErrorCode("RUN_FAILED"), events.WithRunID(t.runID))
	case service.RunCancelled, service.RunInterrupted:
		last = events.NewRunFinishedEventWithOptions(t.threadID, t.runID, events.WithOutcome(events.RunFinishedOutcome{Type: "cancelled"}))
	default:
		last = events.NewRunFinishedEventWithOptions(t.threadID, t.runID, events.WithSuccessOutcome())
	}
	return append(fs, Frame{Event: last, ID: id})
}

// Error returns the end of a stream that cannot go on (the session was deleted): RUN_ERROR
// with the error's code and message.
func (t *Translator) Error(code, msg string) []Frame {
	return []Frame{{Event: events.NewRunErrorEvent(msg, events.WithErrorCode(code), events.WithRunID(t.runID))}}
}

// Interrupt returns the end of a run that waits for the questions qs and the calls
// awaiting approval calls: RUN_FINISHED with the outcome interrupt, one interrupt for
// each; id is its SSE id.
func (t *Translator) Interrupt(qs []*service.Question, calls []*service.ToolCall, id string) []Frame {
	fs := t.closeOpen()
	var ins []types.Interrupt
	for _, q := range qs {
		in := types.Interrupt{ID: q.ID, Reason: "input_required", Message: q.Prompt, ResponseSchema: responseSchema(q)}
		if q.ExpiresAt != nil {
			in.ExpiresAt = q.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		if len(q.Choices) > 0 {
			in.Metadata = map[string]any{"choices": q.Choices, "multiple": q.Multiple}
		}
		ins = append(ins, in)
	}
	for _, c := range calls {
		in := types.Interrupt{ID: c.ID, Reason: "tool_call", ToolCallID: c.ID, Message: "Approve the call of " + c.Name + "?"}
		if c.Approval != nil {
			in.ExpiresAt = c.Approval.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		ins = append(ins, in)
	}
	ev := events.NewRunFinishedEventWithOptions(t.threadID, t.runID, events.WithInterruptOutcome(ins))
	return append(fs, Frame{Event: ev, ID: id})
}

// responseSchema is the JSON Schema of a question's answer: its answerSchema, or, for a
// question with choices, one of them (several, as an array, when it takes several).
func responseSchema(q *service.Question) map[string]any {
	if q.AnswerSchema != "" {
		var s map[string]any
		if json.Unmarshal([]byte(q.AnswerSchema), &s) == nil {
			return s
		}
		return nil
	}
	if len(q.Choices) == 0 {
		return nil
	}
	one := map[string]any{"type": "string", "enum": q.Choices}
	if q.Multiple {
		return map[string]any{"type": "array", "items": one, "minItems": 1, "uniqueItems": true}
	}
	return one
}

// resultOf is what a call's result says: what it returned, or why it did not run or
// failed.
func resultOf(c *service.ToolCall) string {
	switch {
	case c.Result != nil:
		return *c.Result
	case c.Error != nil:
		return *c.Error
	case c.Approval != nil && c.Approval.Reason != "":
		return string(c.Status) + ": " + c.Approval.Reason
	}
	return string(c.Status)
}

// skipRunes returns s without its first n code points.
func skipRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[i:]
		}
		n--
	}
	return ""
}

// stamp sets e's timestamp to the time of the log event it comes from: a replay says when
// things happened, not when they were sent again.
func stamp[E events.Event](e E, at time.Time) E {
	if !at.IsZero() {
		e.SetTimestamp(at.UnixMilli())
	}
	return e
}

// AppendFrame writes f to b as a server-sent event: its id, when it has one, and its JSON
// as the data (one line: JSON escapes every line break).
func AppendFrame(b *bytes.Buffer, f Frame) error {
	data, err := f.Event.ToJSON()
	if err != nil {
		return err
	}
	if f.ID != "" {
		b.WriteString("id: ")
		b.WriteString(f.ID) // base64url: never a line break
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	return nil
}
