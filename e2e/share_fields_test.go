package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

// readerFields is every field of the schema a reader of a share link can reach, from
// SharedSession and from the events sharedStream carries, each with why it tells nothing
// of the owner. A field that becomes reachable (a new field of Message, say) fails
// TestNoOwnerDataInAnySharedAnswer until it is judged here.
var readerFields = map[string]string{
	"SharedSession.title": "the conversation's title: what the link shares", "SharedSession.live": "the link's own",
	"SharedSession.messages": "the branch the link shows", "SharedSession.streamCursor": "a shared cursor: it names no session",

	"Message.id": "a message of the branch", "Message.sessionId": "read empty by a reader",
	"Message.role": "the conversation", "Message.kind": "the conversation", "Message.content": "the conversation",
	"Message.status": "the conversation", "Message.error": "the conversation", "Message.runId": "a run of the branch",
	"Message.question":  "null for a reader: what the session waits on and how to answer it",
	"Message.toolCalls": "masked calls", "Message.createdAt": "the conversation", "Message.parentId": "the message before it on the branch",
	"Message.siblingIds": "the message itself alone for a reader: no other branch",

	"Question.id": "never reached: Message.question is null", "Question.runId": "never reached", "Question.sessionId": "never reached",
	"Question.prompt": "never reached", "Question.choices": "never reached", "Question.multiple": "never reached",
	"Question.answerSchema": "never reached", "Question.answer": "never reached", "Question.askedAt": "never reached",
	"Question.answeredAt": "never reached", "Question.expiresAt": "never reached", "Question.withdrawn": "never reached",
	"Question.withdrawnReason": "never reached",

	"ToolCall.id": "a call of the branch", "ToolCall.callId": "read empty without includeTools", "ToolCall.runId": "a run of the branch",
	"ToolCall.messageId": "a message of the branch", "ToolCall.name": "shown", "ToolCall.arguments": "read empty without includeTools",
	"ToolCall.output": "read empty without includeTools", "ToolCall.result": "null without includeTools",
	"ToolCall.error": "null without includeTools", "ToolCall.status": "shown", "ToolCall.startedAt": "shown",
	"ToolCall.finishedAt": "shown", "ToolCall.approval": "null for a reader: the owner's decision",

	"ToolApproval.requestedArguments": "never reached: ToolCall.approval is null", "ToolApproval.decision": "never reached",
	"ToolApproval.reason": "never reached", "ToolApproval.decidedAt": "never reached", "ToolApproval.expiresAt": "never reached",

	"Run.id": "a run of the branch", "Run.sessionId": "read empty by a reader", "Run.status": "whether the agent works",
	"Run.error": "fit to show", "Run.agent": "read empty by a reader: a setting",
	"Run.waitsForBudget": "read null by a reader: which of the owner's caps holds the run", "Run.usage": "what the reply cost, in tokens",
	"Run.createdAt": "shown", "Run.startedAt": "shown", "Run.finishedAt": "shown",
	"Usage.inputTokens": "shown", "Usage.outputTokens": "shown", "Usage.cachedInputTokens": "shown",

	"MessageAdded.cursor": "a shared cursor", "MessageAdded.at": "shown", "MessageAdded.message": "a masked message",
	"MessageChunk.cursor": "a shared cursor", "MessageChunk.at": "shown", "MessageChunk.messageId": "shown",
	"MessageChunk.delta": "the conversation", "MessageChunk.offset": "shown",
	"MessageCompleted.cursor": "a shared cursor", "MessageCompleted.at": "shown", "MessageCompleted.message": "a masked message",
	"RunStatusChanged.cursor": "a shared cursor", "RunStatusChanged.at": "shown", "RunStatusChanged.run": "a masked run",
	"BranchSelected.cursor": "a shared cursor", "BranchSelected.at": "shown", "BranchSelected.leafId": "the branch's new end",
	"ToolCallStarted.cursor": "a shared cursor", "ToolCallStarted.at": "shown", "ToolCallStarted.toolCall": "a masked call",
	"ToolCallFinished.cursor": "a shared cursor", "ToolCallFinished.at": "shown", "ToolCallFinished.toolCall": "a masked call",
	"ToolApprovalDecided.cursor": "a shared cursor", "ToolApprovalDecided.at": "shown", "ToolApprovalDecided.toolCall": "a masked call",
	"ToolCallOutput.cursor": "a shared cursor", "ToolCallOutput.at": "shown", "ToolCallOutput.toolCallId": "shown",
	"ToolCallOutput.messageId": "shown", "ToolCallOutput.delta": "the call's output: includeTools only", "ToolCallOutput.offset": "shown",
}

// readerSchema walks the schema from what a reader gets: the fields it reaches, and a
// selection of all of them for each root type.
type readerSchema struct {
	s       *ast.Schema
	reached map[string]bool
}

func loadReaderSchema(t *testing.T) *readerSchema {
	t.Helper()
	src, err := os.ReadFile("../schema.graphqls")
	if err != nil {
		t.Fatal(err)
	}
	s, gerr := gqlparser.LoadSchema(&ast.Source{Name: "schema.graphqls", Input: string(src)})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return &readerSchema{s: s, reached: map[string]bool{}}
}

// selection selects every field of type name, and of the objects below it, noting each.
func (rs *readerSchema) selection(name string) string {
	def := rs.s.Types[name]
	var parts []string
	for _, f := range def.Fields {
		if strings.HasPrefix(f.Name, "__") {
			continue
		}
		rs.reached[name+"."+f.Name] = true
		part := f.Name
		if sub := rs.s.Types[f.Type.Name()]; sub.Kind == ast.Object || sub.Kind == ast.Interface {
			part += " " + rs.selection(sub.Name)
		}
		parts = append(parts, part)
	}
	return "{ " + strings.Join(parts, " ") + " }"
}

// What the owner has that no shared answer may hold: their ID, the session's ID and their
// other session's, the settings, and what the session waits on.
const (
	secretPrompt = "SECRET-SYSTEM-PROMPT-7f3a"
	secretModel  = "SECRET-MODEL-9c1e"
)

// No shared answer holds anything of the owner's: the fields a reader reaches are those
// judged in readerFields, and every one of them, read and streamed through a live link of
// a session with settings of its own, a tool call and a pending question, beside another
// session of the owner's, holds neither the owner's ID, nor the session's or the other
// session's, nor the settings, nor the pending question.
func TestNoOwnerDataInAnySharedAnswer(t *testing.T) {
	rs := loadReaderSchema(t)
	query := `query($t: String!){ sharedSession(token: $t) ` + rs.selection("SharedSession") + ` }`
	var frags []string
	for _, typ := range service.SharedEventTypes() {
		frags = append(frags, "... on "+string(typ)+" "+rs.selection(string(typ)))
	}
	sub := `subscription($t: String!, $a: String){ messageStream: sharedStream(token: $t, after: $a){ __typename ` + strings.Join(frags, " ") + ` } }`
	var unjudged, gone []string
	for f := range rs.reached {
		if _, ok := readerFields[f]; !ok {
			unjudged = append(unjudged, f)
		}
	}
	for f := range readerFields {
		if !rs.reached[f] {
			gone = append(gone, f)
		}
	}
	sort.Strings(unjudged)
	sort.Strings(gone)
	if len(unjudged) > 0 || len(gone) > 0 {
		t.Fatalf("fields a reader reaches that readerFields does not judge: %v; judged but no longer reached: %v", unjudged, gone)
	}

	a := startApp(t, "sqlite", nil)
	owner := guest(t, a)
	var me struct{ Viewer struct{ ID string } }
	owner.Must(`{ viewer { id } }`, nil, &me)
	other := owner.CreateSession(nil)
	sid := owner.CreateSession(map[string]any{"systemPrompt": secretPrompt, "model": secretModel})
	_, evs := owner.Connect("graphql-transport-ws").Stream(sid, owner.Cursor(sid))
	_, run := owner.Send(sid, "/tool some words")
	evs.Until("the tool's reply", tgtest.RunEnds(run))
	_, token, _ := link(t, owner, sid, ", live: true")
	reader := anonymous(t, a)
	first := reader.Do(query, map[string]any{"t": token})
	if len(first.Errors) > 0 {
		t.Fatalf("the full query: %+v", first.Errors)
	}
	var cur struct{ SharedSession struct{ StreamCursor string } }
	if err := json.Unmarshal(first.Data, &cur); err != nil {
		t.Fatal(err)
	}
	_, frames := reader.Connect("graphql-transport-ws").Subscribe(sub, map[string]any{"t": token, "a": cur.SharedSession.StreamCursor})
	owner.Send(sid, "/ask Which colour?")
	asked := evs.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
	raw := []string{string(first.Data)}
	for deadline := time.After(tgtest.Wait); ; {
		var f tgtest.Frame
		select {
		case f = <-frames:
		case <-deadline:
			t.Fatalf("the reader did not see the run wait; it saw %s", raw[1:])
		}
		if len(f.Errors) > 0 || f.Complete {
			t.Fatalf("the reader's stream ended: %+v", f)
		}
		raw = append(raw, string(f.Data))
		for _, typ := range []string{"QuestionAsked", "ToolApprovalRequested", "SessionUpdated", "QuestionWithdrawn"} {
			if strings.Contains(string(f.Data), `"__typename":"`+typ+`"`) {
				t.Errorf("the reader got a %s", typ)
			}
		}
		if strings.Contains(string(f.Data), "WAITING_FOR_INPUT") {
			break
		}
	}
	second := reader.Do(query, map[string]any{"t": token})
	raw = append(raw, string(second.Data))
	forbidden := map[string]string{"the owner's ID": me.Viewer.ID, "the session's ID": sid, "the other session's ID": other,
		"the system prompt": secretPrompt, "the model": secretModel, "the pending question's ID": asked.Question.ID}
	for what, s := range forbidden {
		for _, r := range raw {
			if strings.Contains(r, s) {
				t.Errorf("a shared answer holds %s (%s): %s", what, s, r)
			}
		}
	}
	if !slices.ContainsFunc(raw, func(r string) bool { return strings.Contains(r, `"agent":""`) }) {
		t.Error("no run with an empty agent in the shared answers: was a run streamed?")
	}
}
