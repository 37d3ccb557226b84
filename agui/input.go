// Package agui speaks AG-UI (the Agent-User Interaction protocol of CopilotKit and
// @ag-ui/client) for talkgraph: it reads a RunAgentInput (Decode), turns its resume
// entries into answers and decisions (Responses), and renders a session's log as AG-UI
// events (Translator), each with the cursor of the log event it comes from. It is another
// renderer of the session log, not a core of its own: what an AG-UI request changes goes
// through the service's commands (OpenThread, AddMessage, Resume), and httpapi's /agui
// serves it. The event types are those of the AG-UI Go SDK.
package agui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/talkgraph/talkgraph/service"
)

// Input is what talkgraph takes from a RunAgentInput.
type Input struct {
	// ThreadID names the session (see service.OpenThread); RunID is the client's and is
	// not used (events carry talkgraph's run IDs).
	ThreadID, RunID string
	// Message is the last of the input's messages when it is the user's: added to the
	// session unless the session holds it (its ID is its idempotency key).
	Message *UserMessage
	// Resume answers what the session's run waits on.
	Resume []ResumeEntry
}

// UserMessage is a user message of the input, its content as text.
type UserMessage struct {
	ID, Content string
}

// ResumeEntry is one entry of the input's resume: the SDK's, with its payload as it came.
type ResumeEntry struct {
	InterruptID string             `json:"interruptId"`
	Status      types.ResumeStatus `json:"status"`
	Payload     json.RawMessage    `json:"payload,omitempty"`
}

// Decode reads a RunAgentInput; an error (to answer with 400) says what is wrong with it.
func Decode(body []byte) (*Input, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil || probe == nil {
		return nil, fmt.Errorf("the body is not a RunAgentInput: a JSON object is expected")
	}
	for _, f := range []string{"threadId", "runId", "messages"} {
		if _, ok := probe[f]; !ok {
			return nil, fmt.Errorf("the body is not a RunAgentInput: %s is missing", f)
		}
	}
	var in types.RunAgentInput
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("the body is not a RunAgentInput: %v", err)
	}
	var resume struct {
		Resume []ResumeEntry `json:"resume"`
	}
	if err := json.Unmarshal(body, &resume); err != nil {
		return nil, fmt.Errorf("the body is not a RunAgentInput: resume: %v", err)
	}
	if in.ThreadID == "" {
		return nil, fmt.Errorf("threadId is empty")
	}
	out := &Input{ThreadID: in.ThreadID, RunID: in.RunID, Resume: resume.Resume}
	for i, e := range out.Resume {
		switch {
		case e.InterruptID == "":
			return nil, fmt.Errorf("resume[%d]: interruptId is empty", i)
		case e.Status != types.ResumeStatusResolved && e.Status != types.ResumeStatusCancelled:
			return nil, fmt.Errorf("resume[%d]: status must be resolved or cancelled", i)
		}
	}
	for i, m := range in.Messages {
		if m.ID == "" || m.Role == "" {
			return nil, fmt.Errorf("messages[%d]: a message needs an id and a role", i)
		}
	}
	if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == types.RoleUser {
		m := in.Messages[n-1]
		text, err := textOf(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %v", n-1, err)
		}
		out.Message = &UserMessage{ID: m.ID, Content: text}
	}
	return out, nil
}

// textOf is a user message's content as text: a string, or the text parts of a list of
// parts (talkgraph's agents read text only).
func textOf(content any) (string, error) {
	switch c := content.(type) {
	case string:
		return c, nil
	case []any:
		var b strings.Builder
		for _, p := range c {
			part, ok := p.(map[string]any)
			if !ok {
				return "", fmt.Errorf("a content part is not an object")
			}
			if part["type"] == "text" {
				if t, ok := part["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		if b.Len() == 0 {
			return "", fmt.Errorf("the content has no text part; talkgraph's agents read text only")
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("content must be a string or a list of parts")
}

// Responses turns resume entries into what service.Resume takes, given what the
// session's run waits on (v): an entry that names a pending question answers it
// (resolved: the payload is the answer, a string as it is, or for a question with an
// answerSchema, or a multiple choice, the JSON value itself) or withdraws it (cancelled);
// one that names a call awaiting approval approves it (resolved: with payload.arguments,
// a JSON object, as the edited arguments) or rejects it (cancelled: payload.reason, if a
// string, told to the agent). An entry naming nothing pending is taken for a call when
// isCall says so and for a question otherwise; the service then says why it waits no
// more. The error says which entry is wrong.
func Responses(entries []ResumeEntry, v *service.SessionView, isCall func(id string) bool) (*Resume, error) {
	r := &Resume{entry: map[string][]int{}}
	questions := map[string]*service.Question{}
	for _, q := range v.PendingQuestions {
		questions[q.ID] = q
	}
	calls := map[string]bool{}
	for _, c := range v.PendingApprovals {
		calls[c.ID] = true
	}
	for i, e := range entries {
		q, isQuestion := questions[e.InterruptID]
		call := calls[e.InterruptID] || (!isQuestion && isCall(e.InterruptID))
		payload := bytes.TrimSpace(e.Payload)
		if bytes.Equal(payload, []byte("null")) {
			payload = nil
		}
		switch {
		case call && e.Status == types.ResumeStatusResolved:
			d := service.Decision{ToolCallID: e.InterruptID, Decision: service.DecisionApprove}
			if len(payload) > 0 {
				var p struct {
					Arguments json.RawMessage `json:"arguments"`
				}
				if err := json.Unmarshal(payload, &p); err != nil {
					return nil, fmt.Errorf("resume[%d]: the payload of an approval is an object, {} or {\"arguments\": {…}}", i)
				}
				if args := bytes.TrimSpace(p.Arguments); len(args) > 0 {
					if args[0] != '{' {
						return nil, fmt.Errorf("resume[%d]: payload.arguments must be a JSON object", i)
					}
					var b bytes.Buffer
					if err := json.Compact(&b, args); err != nil {
						return nil, fmt.Errorf("resume[%d]: payload.arguments: %v", i, err)
					}
					d.Arguments = b.String()
				}
			}
			r.Decisions = append(r.Decisions, d)
			r.entry["decisions"] = append(r.entry["decisions"], i)
		case call:
			d := service.Decision{ToolCallID: e.InterruptID, Decision: service.DecisionReject}
			var p struct {
				Reason any `json:"reason"`
			}
			if len(payload) > 0 && json.Unmarshal(payload, &p) == nil {
				d.Reason, _ = p.Reason.(string)
			}
			r.Decisions = append(r.Decisions, d)
			r.entry["decisions"] = append(r.entry["decisions"], i)
		case e.Status == types.ResumeStatusCancelled:
			r.Cancelled = append(r.Cancelled, e.InterruptID)
			r.entry["cancelled"] = append(r.entry["cancelled"], i)
		default:
			if len(payload) == 0 {
				return nil, fmt.Errorf("resume[%d]: a resolved question needs its answer as payload", i)
			}
			var answer string
			if json.Unmarshal(payload, &answer) != nil || (q != nil && q.AnswerSchema != "") {
				var b bytes.Buffer
				if err := json.Compact(&b, payload); err != nil {
					return nil, fmt.Errorf("resume[%d]: payload: %v", i, err)
				}
				answer = b.String()
			}
			r.Answers = append(r.Answers, service.Answer{QuestionID: e.InterruptID, Answer: answer})
			r.entry["answers"] = append(r.entry["answers"], i)
		}
	}
	return r, nil
}

// Resume is what service.Resume takes for a RunAgentInput's resume entries.
type Resume struct {
	service.RespondArgs
	entry map[string][]int // the entry each item of a list of RespondArgs comes from, by the list's name
}

// Named returns err, an error of service.Resume for r, with a message that names the
// resume entry it is about (resume[i], not the service's answers[j]) where it is about one.
func (r *Resume) Named(err error) error {
	var ie *service.InputError
	if !errors.As(err, &ie) {
		return err
	}
	if from := r.entry[ie.List]; ie.Index >= 0 && ie.Index < len(from) {
		return service.Errorf(service.ErrorCode(ie.Err), "resume[%d]: %s", from[ie.Index], service.ErrorMessage(ie.Err))
	}
	return err
}
