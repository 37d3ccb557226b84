package agui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/agui"
	"github.com/talkgraph/talkgraph/service"
)

// TestDecode: a RunAgentInput's thread, its last message when it is the user's (as text),
// and its resume entries; what is not a RunAgentInput says what is wrong.
func TestDecode(t *testing.T) {
	in, err := agui.Decode([]byte(`{"threadId":"t","runId":"r","messages":[
		{"id":"a","role":"assistant","content":"earlier"},
		{"id":"u","role":"user","content":[{"type":"text","text":"hello "},{"type":"image","source":{}},{"type":"text","text":"there"}]}],
		"resume":[{"interruptId":"q","status":"resolved","payload":{"name":"Ada"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if in.ThreadID != "t" || in.Message == nil || *in.Message != (agui.UserMessage{ID: "u", Content: "hello there"}) ||
		len(in.Resume) != 1 || in.Resume[0].InterruptID != "q" || string(in.Resume[0].Payload) != `{"name":"Ada"}` {
		t.Errorf("decoded %+v, message %+v", in, in.Message)
	}
	if in, err := agui.Decode([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant","content":"x"}]}`)); err != nil || in.Message != nil {
		t.Errorf("a last message of the assistant's is no message to add: %+v, %v", in, err)
	}
	for body, says := range map[string]string{
		`{`:                            "RunAgentInput",
		`{"threadId":"t","runId":"r"}`: "messages is missing",
		`{"threadId":"","runId":"r","messages":[]}`:                                                       "threadId is empty",
		`{"threadId":"t","runId":"r","messages":[{"role":"user","content":"x"}]}`:                         "messages[0]",
		`{"threadId":"t","runId":"r","messages":[],"resume":[{"status":"resolved"}]}`:                     "resume[0]: interruptId is empty",
		`{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"q","status":"maybe"}]}`:      "resume[0]: status",
		`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"image"}]}]}`: "no text part",
	} {
		if _, err := agui.Decode([]byte(body)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want an error saying %q", body, err, says)
		}
	}
}

// TestResponses: resume entries as answers, decisions and withdrawals: a call approved
// ({} or no payload, or edited arguments) or rejected (with the reason); a question
// answered (a string as it is; for a form, the JSON value) or withdrawn; refusals name the
// entry, theirs and the service's.
func TestResponses(t *testing.T) {
	v := &service.SessionView{
		PendingQuestions: []*service.Question{{ID: "q1"}, {ID: "q2", AnswerSchema: `{"type":"string"}`}, {ID: "q3"}},
		PendingApprovals: []*service.ToolCall{{ID: "c1"}, {ID: "c2"}, {ID: "c3"}},
	}
	entry := func(id, status, payload string) agui.ResumeEntry {
		e := agui.ResumeEntry{InterruptID: id, Status: "resolved"}
		if status != "" {
			e.Status = "cancelled"
		}
		if payload != "" {
			e.Payload = json.RawMessage(payload)
		}
		return e
	}
	r, err := agui.Responses([]agui.ResumeEntry{
		entry("c1", "", ""), entry("c2", "", `{"arguments": {"text": "edited"}}`), entry("c3", "cancelled", `{"reason":"not now"}`),
		entry("q1", "", `"Ada"`), entry("q2", "", `"Ada"`), entry("q3", "cancelled", ""),
	}, v, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := service.RespondArgs{
		Answers: []service.Answer{{QuestionID: "q1", Answer: "Ada"}, {QuestionID: "q2", Answer: `"Ada"`}},
		Decisions: []service.Decision{{ToolCallID: "c1", Decision: service.DecisionApprove}, {ToolCallID: "c2", Decision: service.DecisionApprove, Arguments: `{"text":"edited"}`},
			{ToolCallID: "c3", Decision: service.DecisionReject, Reason: "not now"}},
		Cancelled: []string{"q3"},
	}
	if got, _ := json.Marshal(r.RespondArgs); string(got) != string(must(json.Marshal(wantArgs))) {
		t.Errorf("responses %s, want %+v", got, wantArgs)
	}
	// The service's refusal of its decisions[1] is about resume[1]; of answers[0], resume[3].
	for list, i := range map[string]int{"decisions": 1, "answers": 0} {
		err := r.Named(&service.InputError{List: list, Index: i, Err: service.Errorf(service.EINVALID, "no")})
		if want := map[string]string{"decisions": "resume[1]: no", "answers": "resume[3]: no"}[list]; service.ErrorMessage(err) != want || service.ErrorCode(err) != service.EINVALID {
			t.Errorf("%s[%d] named %v, want %q", list, i, err, want)
		}
	}
	for _, tc := range []struct {
		e    agui.ResumeEntry
		says string
	}{
		{entry("c1", "", `"yes"`), "resume[0]: the payload of an approval is an object"},
		{entry("c1", "", `{"arguments": "x"}`), "resume[0]: payload.arguments must be a JSON object"},
		{entry("q1", "", ""), "resume[0]: a resolved question needs its answer"},
	} {
		if _, err := agui.Responses([]agui.ResumeEntry{tc.e}, v, func(string) bool { return false }); err == nil || !strings.HasPrefix(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want %q", tc.e, err, tc.says)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
