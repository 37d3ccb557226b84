package openai_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// history builds a session history; seq follows the order of the calls.
type history struct {
	msgs []service.HistoryMessage
}

func (h *history) add(role service.Role, kind service.MessageKind, status service.MessageStatus, content string) *service.HistoryMessage {
	n := len(h.msgs) + 1
	h.msgs = append(h.msgs, service.HistoryMessage{Message: service.Message{
		ID: "m" + string(rune('a'+n)), SessionID: "s1", Seq: int64(n), Role: role, Kind: kind,
		Content: content, Status: status, RunID: "r1", CreatedAt: time.Unix(int64(n), 0),
	}})
	return &h.msgs[len(h.msgs)-1]
}

func (h *history) user(content string) {
	h.add(service.RoleUser, service.KindText, service.MessageComplete, content)
}

func (h *history) assistant(status service.MessageStatus, content string, calls ...*service.ToolCall) {
	m := h.add(service.RoleAssistant, service.KindText, status, content)
	m.ToolCalls = calls
}

// question records a question and, when answer is not nil, its answer, as the service
// stores them: a QUESTION message, then an ANSWER message.
func (h *history) question(id, prompt string, answer *string) {
	q := &service.Question{ID: id, RunID: "r1", SessionID: "s1", Prompt: prompt, Answer: answer, Withdrawn: answer == nil}
	m := h.add(service.RoleAssistant, service.KindQuestion, service.MessageComplete, prompt)
	m.QuestionID, m.Question = id, q
	if answer != nil {
		a := h.add(service.RoleUser, service.KindAnswer, service.MessageComplete, *answer)
		a.QuestionID = id
	}
}

func toolCall(id, name, args string, status service.ToolCallStatus) *service.ToolCall {
	return &service.ToolCall{ID: "stored-" + id, CallID: id, RunID: "r1", SessionID: "s1", Name: name, Arguments: args, Status: status}
}

func completed(tc *service.ToolCall, result string) *service.ToolCall {
	tc.Result = &result
	return tc
}

// The server restarted while a run waited for an answer; the run starts again on a history
// whose ask_user call has no result but whose question was answered. The request carries
// the answer as the call's result.
func TestAnswerAfterRestart(t *testing.T) {
	var h history
	h.user("Book a table for tonight")
	h.assistant(service.MessageComplete, "Sure.",
		toolCall("call_ask1", "ask_user", `{"question":"For how many people?","choices":["2","4"]}`, service.ToolRunning))
	h.question("q1", "For how many people?", ptr("4"))

	srv := newFakeServer(t, fakellm.TextReply("Booked for 4."))
	a := newAgent(t, srv, openai.Config{SystemPrompt: "You book tables."})
	out := newRecorder()
	if err := run(t, a, h.msgs, out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A repeated call ID is replaced by one of nine letters and digits (any provider takes it).
	got := srv.Request(0).Transcript()
	generated := regexp.MustCompile(`(\[|^tool )[a-zA-Z0-9]{9}( |:)`)
	for i := range got {
		if strings.HasPrefix(got[i], "assistant: a3 ") || strings.HasPrefix(got[i], "tool ") && strings.HasSuffix(got[i], ": r3") {
			got[i] = generated.ReplaceAllString(got[i], "${1}<generated>${2}")
		}
	}
	equal(t, "request", got, []string{
		"system: You book tables.",
		"user: Book a table for tonight",
		`assistant: Sure. [call_ask1 ask_user {"question":"For how many people?","choices":["2","4"]}]`,
		"tool call_ask1: 4",
	})
	if len(out.asks) != 0 {
		t.Errorf("asked again: %+v", out.asks)
	}
	if got := out.text(); got != "Booked for 4." {
		t.Errorf("text = %q", got)
	}
}

// The history is rebuilt into messages the API accepts whatever happened to the runs.
func TestHistoryRebuild(t *testing.T) {
	failed := toolCall("c2", "get_weather", `{"city":"B"}`, service.ToolFailed)
	failed.Error = ptr("boom")
	stopped := toolCall("c4", "shell", `{"command":"make"}`, service.ToolCancelled)
	stopped.Output = "building…\n"

	var h history
	h.user("u1")
	h.assistant(service.MessageComplete, "a1",
		completed(toolCall("c1", "get_weather", `{"city":"A"}`, service.ToolCompleted), "r1"),
		failed,
		toolCall("c3", "get_weather", `{"city":"C"}`, service.ToolRunning), // never ran: dropped
		stopped, // printed, then stopped: kept, marked
	)
	h.user("u2")
	// Interrupted mid-stream: the text stays, the half-written call goes.
	h.assistant(service.MessageInterrupted, "partial reply", toolCall("c5", "get_weather", `{"ci`, service.ToolCancelled))
	h.user("u3")
	h.assistant(service.MessageInterrupted, "") // interrupted before a word
	h.user("u3b")
	h.assistant(service.MessageFailed, "")
	// A question another agent (demo's /ask) asked, without a tool call.
	h.question("q9", "Color?", ptr("blue"))
	// An ask_user call answered in its run: the question is not repeated.
	h.assistant(service.MessageComplete, "a2", completed(toolCall("c7", "ask_user", `{"question":"Go?"}`, service.ToolCompleted), "yes"))
	h.question("q11", "Go?", ptr("yes"))
	h.assistant(service.MessageComplete, "Going.")
	h.user("u4")
	// A server that numbers its calls afresh each time, and arguments cut short.
	h.assistant(service.MessageComplete, "a3", completed(toolCall("c1", "get_weather", `{"city":`, service.ToolCompleted), "r3"))
	// A question withdrawn by a newer message: the user saw it, so the model does too.
	h.assistant(service.MessageComplete, "a4", toolCall("c6", "ask_user", `{"question":"Proceed?"}`, service.ToolCancelled))
	h.question("q10", "Proceed?", nil)
	h.user("u5")

	srv := newFakeServer(t, fakellm.TextReply("ok"))
	a := newAgent(t, srv, openai.Config{SystemPrompt: "sys"})
	if err := run(t, a, h.msgs, newRecorder()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A repeated call ID is replaced by one of nine letters and digits (any provider takes it).
	got := srv.Request(0).Transcript()
	generated := regexp.MustCompile(`(\[|^tool )[a-zA-Z0-9]{9}( |:)`)
	for i := range got {
		if strings.HasPrefix(got[i], "assistant: a3 ") || strings.HasPrefix(got[i], "tool ") && strings.HasSuffix(got[i], ": r3") {
			got[i] = generated.ReplaceAllString(got[i], "${1}<generated>${2}")
		}
	}
	equal(t, "request", got, []string{
		"system: sys",
		"user: u1",
		`assistant: a1 [c1 get_weather {"city":"A"}] [c2 get_weather {"city":"B"}] [c4 shell {"command":"make"}]`,
		"tool c1: r1",
		"tool c2: error: boom",
		"tool c4: building…\n\n[stopped before it finished]",
		"user: u2",
		"assistant: partial reply",
		"user: u3\n\nu3b",
		"assistant: Color?",
		"user: blue",
		`assistant: a2 [c7 ask_user {"question":"Go?"}]`,
		"tool c7: yes",
		"assistant: Going.",
		"user: u4",
		"assistant: a3 [<generated> get_weather {}]",
		"tool <generated>: r3",
		"assistant: a4\n\nProceed?",
		"user: u5",
	})
}
