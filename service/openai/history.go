package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	oai "github.com/openai/openai-go/v3"

	"github.com/talkgraph/talkgraph/service"
)

// A wire message is one entry of the list sent to the model, before it becomes SDK params.
// rebuild works on these so that its rules can be read (and tested) apart from the SDK.
type wireMsg struct {
	role    string // "system", "user", "assistant" or "tool"
	content string
	calls   []wireCall // assistant only
	callID  string     // tool only
	// pending is, for a tool message, the call the user approved while its run waited
	// and that has not run yet: the resumed run runs it and fills content in.
	pending *service.ToolCall
}

type wireCall struct{ id, name, args string }

// stoppedNote ends the result of a call that printed output but was stopped before it
// could finish: the model learns that it ran (it may have had effects) and how far.
const stoppedNote = "\n[stopped before it finished]"

// rebuild turns a session's history into the messages the model reads, valid for the
// chat-completions API whatever state the history is in:
//
//   - The system prompt comes first, if any.
//   - USER TEXT messages become user messages.
//   - ASSISTANT TEXT messages become assistant messages with their text (partial text of
//     interrupted or failed replies included) and their tool calls, each followed by one
//     tool message with its result, or "error: …" for a failed call.
//   - An ask_user call without a result takes the answer of the next answered question
//     in the history (the run was waiting when the server stopped, and is now resumed).
//   - A call the user rejected, or withdrawn undecided (expired), has the reason as its
//     result; one the user approved while the run waited and that has not run is marked
//     pending, for the resumed run to run (runApproved).
//   - A call that never finished (stopped, interrupted) is dropped, unless it printed
//     output: then it is kept with that output, marked as stopped.
//   - QUESTION and ANSWER messages are the service's record of ask_user and are not sent
//     again, except questions no ask_user call accounts for (asked by another agent, or
//     withdrawn unanswered): those become plain assistant and user text, so nothing the
//     user saw is lost.
//   - Consecutive messages of one role are merged (some chat templates insist on turns
//     that alternate), tool call IDs are made unique and non-empty, and arguments that
//     are not JSON are replaced by {}.
func rebuild(system string, history []service.HistoryMessage) []wireMsg {
	qa := newAnswers(history)
	ids := &callIDs{seen: map[string]bool{}}
	var msgs []wireMsg
	if system != "" {
		msgs = append(msgs, wireMsg{role: "system", content: system})
	}
	for pos, h := range history {
		switch {
		case h.Kind == service.KindQuestion:
			if q := qa.byPos[pos]; q != nil && !q.used {
				msgs = append(msgs, wireMsg{role: "assistant", content: questionText(q)})
			}
		case h.Kind == service.KindAnswer:
			if q := qa.byQuestion[h.QuestionID]; q == nil || !q.used {
				msgs = append(msgs, wireMsg{role: "user", content: h.Content})
			}
		case h.Role == service.RoleUser:
			msgs = append(msgs, wireMsg{role: "user", content: h.Content})
		case h.Role == service.RoleAssistant:
			msgs = append(msgs, assistantTurn(pos, h, qa, ids)...)
		}
	}
	return normalize(msgs)
}

// assistantTurn is an assistant message and the answers to its tool calls.
func assistantTurn(pos int, h service.HistoryMessage, qa *answers, ids *callIDs) []wireMsg {
	asst := wireMsg{role: "assistant", content: h.Content}
	var results []wireMsg
	for _, tc := range h.ToolCalls {
		if tc == nil {
			continue
		}
		// An answered question belongs to the ask_user call that asked it, whether the
		// call got its result in its run or the run was cut short while waiting.
		var claimed *asked
		if tc.Name == askUserName {
			claimed = qa.take(pos, tc.Arguments)
		}
		result, ok := "", true
		var pending *service.ToolCall
		switch {
		case tc.Result != nil:
			result = *tc.Result
		case claimed != nil:
			result = *claimed.answer
		case tc.Status == service.ToolRejected && tc.Approval != nil && tc.Approval.Decision != nil:
			result = (&service.Rejected{Reason: tc.Approval.Reason, ByUser: true}).Text()
		case tc.Status == service.ToolCancelled && tc.Approval != nil && tc.Approval.Reason != "":
			result = (&service.Rejected{Reason: tc.Approval.Reason}).Text()
		case tc.Status == service.ToolRunning && tc.Output == "" && tc.Approval != nil &&
			tc.Approval.Decision != nil && *tc.Approval.Decision == service.DecisionApprove:
			pending = tc // approved while the run waited: it runs when the run resumes
		case tc.Error != nil:
			result = toolErrorText(*tc.Error)
		case tc.Status == service.ToolCompleted:
			// A result of "" that was stored as nothing.
		case tc.Status == service.ToolFailed:
			result = toolErrorText("the tool failed")
		case tc.Output != "":
			result = tc.Output + stoppedNote
		default:
			ok = false // announced but never run: nothing to tell the model
		}
		if !ok {
			continue
		}
		id := ids.unique(tc.CallID)
		asst.calls = append(asst.calls, wireCall{id: id, name: tc.Name, args: validArgs(tc.Arguments)})
		results = append(results, wireMsg{role: "tool", callID: id, content: result, pending: pending})
	}
	return append([]wireMsg{asst}, results...)
}

// answers indexes the questions of a history, so that ask_user calls can claim theirs.
type answers struct {
	list       []*asked
	byPos      map[int]*asked    // by the position of its QUESTION message
	byQuestion map[string]*asked // by question ID
}

type asked struct {
	pos    int // position of the QUESTION message, or of the ANSWER when there is none
	prompt string
	// choices are shown with the prompt when it is sent as plain text.
	choices []string
	answer  *string
	used    bool // claimed by an ask_user call
}

func newAnswers(history []service.HistoryMessage) *answers {
	qa := &answers{byPos: map[int]*asked{}, byQuestion: map[string]*asked{}}
	get := func(id string, pos int) *asked {
		if q := qa.byQuestion[id]; q != nil && id != "" {
			return q
		}
		q := &asked{pos: pos}
		qa.list = append(qa.list, q)
		if id != "" {
			qa.byQuestion[id] = q
		}
		return q
	}
	for pos, h := range history {
		switch h.Kind {
		case service.KindQuestion:
			q := get(h.QuestionID, pos)
			qa.byPos[pos] = q
			q.prompt = h.Content
			if h.Question != nil {
				if h.Question.Prompt != "" {
					q.prompt = h.Question.Prompt
				}
				q.choices = h.Question.Choices
				if h.Question.Answer != nil && q.answer == nil {
					q.answer = h.Question.Answer
				}
			}
		case service.KindAnswer:
			q := get(h.QuestionID, pos)
			answer := h.Content
			q.answer = &answer
		}
	}
	return qa
}

// take claims, for an ask_user call made at position pos with the given arguments, the
// first unclaimed answered question after pos, preferring one with the same prompt. It
// returns nil when there is none, or when the arguments hold no question (the call
// failed without asking).
func (qa *answers) take(pos int, args string) *asked {
	a, err := parseAskArgs(args)
	if err != nil {
		return nil
	}
	prompt := a.Question
	var first *asked
	for _, q := range qa.list {
		if q.used || q.answer == nil || q.pos <= pos {
			continue
		}
		if q.prompt == prompt {
			first = q
			break
		}
		if first == nil {
			first = q
		}
	}
	if first != nil {
		first.used = true
	}
	return first
}

func questionText(q *asked) string {
	if len(q.choices) == 0 {
		return q.prompt
	}
	return fmt.Sprintf("%s (choices: %s)", q.prompt, strings.Join(q.choices, ", "))
}

// normalize drops empty messages and merges two user or two plain assistant messages in a
// row.
func normalize(msgs []wireMsg) []wireMsg {
	var out []wireMsg
	for _, m := range msgs {
		if m.role != "tool" && m.content == "" && len(m.calls) == 0 {
			continue
		}
		if n := len(out); n > 0 && (m.role == "user" || m.role == "assistant") &&
			out[n-1].role == m.role && len(out[n-1].calls) == 0 {
			prev := &out[n-1]
			prev.content = joinText(prev.content, m.content)
			prev.calls = m.calls
			continue
		}
		out = append(out, m)
	}

	return out
}

// callIDs hands out the tool call IDs of a rebuilt history: the model's own (the calls'
// CallID), unless empty or already used (a server that numbers its calls call_0, call_1, …
// in every response), and otherwise IDs of the shape every provider accepts (newCallID).
type callIDs struct {
	seen map[string]bool
}

func (c *callIDs) unique(id string) string {
	for id == "" || c.seen[id] {
		id = newCallID()
	}
	c.seen[id] = true
	return id
}

func joinText(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n\n" + b
}

// validArgs returns args if it is a JSON object, else "{}": some servers parse the
// arguments of past calls and reject the whole request when they cannot.
func validArgs(args string) string {
	var v map[string]any
	if json.Unmarshal([]byte(args), &v) != nil {
		return "{}"
	}
	return args
}

// toParams converts wire messages into SDK params.
func toParams(msgs []wireMsg) []oai.ChatCompletionMessageParamUnion {
	out := make([]oai.ChatCompletionMessageParamUnion, 0, len(msgs))
	for _, m := range msgs {
		switch m.role {
		case "system":
			out = append(out, oai.SystemMessage(m.content))
		case "user":
			out = append(out, oai.UserMessage(m.content))
		case "assistant":
			out = append(out, assistantParam(m.content, m.calls))
		case "tool":
			out = append(out, oai.ToolMessage(m.content, m.callID))
		}
	}
	return out
}

// assistantParam is an assistant message; content is left out when empty, as the API
// wants for a message that only calls tools.
func assistantParam(content string, calls []wireCall) oai.ChatCompletionMessageParamUnion {
	var p oai.ChatCompletionAssistantMessageParam
	if content != "" || len(calls) == 0 {
		p.Content.OfString = oai.String(content)
	}
	for _, c := range calls {
		p.ToolCalls = append(p.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
				ID: c.id,
				Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      c.name,
					Arguments: c.args,
				},
			},
		})
	}
	return oai.ChatCompletionMessageParamUnion{OfAssistant: &p}
}
