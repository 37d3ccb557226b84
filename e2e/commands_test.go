package e2e

import (
	"os"
	"slices"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

// mutationCalls holds, for every mutation of the schema, a call of it whose arguments are
// right on their face, so that what it runs into is the service's door: it names sessions,
// messages, questions and calls that may not exist.
var mutationCalls = map[string]struct {
	doc  string
	vars func(sid, mid string) map[string]any
}{
	"createTalkSession": {`mutation { createTalkSession(input: {title: "t"}) { id } }`, nil},
	"renameTalkSession": {`mutation($s: ID!) { renameTalkSession(input: {id: $s, title: "t"}) { id } }`, sessionVar},
	"updateTalkSessionSettings": {`mutation($s: ID!) { updateTalkSessionSettings(input: {id: $s, settings: {model: "m"}}) { id } }`,
		sessionVar},
	"deleteTalkSession": {`mutation($s: ID!) { deleteTalkSession(id: $s) }`, sessionVar},
	"addMessage":        {`mutation($s: ID!) { addMessage(input: {sessionId: $s, content: "hi"}) { run { id } } }`, sessionVar},
	"respondToQuestion": {`mutation($q: ID!) { respondToQuestion(input: {questionId: $q, answer: "a"}) { run { id } } }`,
		func(_, mid string) map[string]any { return map[string]any{"q": mid} }},
	"decideToolCall": {`mutation($c: ID!) { decideToolCall(input: {toolCallId: $c, decision: APPROVE}) { run { id } } }`,
		func(_, mid string) map[string]any { return map[string]any{"c": mid} }},
	"respondToInputs": {`mutation($s: ID!, $q: ID!) { respondToInputs(input: {sessionId: $s, answers: [{questionId: $q, answer: "a"}]}) { run { id } } }`,
		func(sid, mid string) map[string]any { return map[string]any{"s": sid, "q": mid} }},
	"cancelRun":         {`mutation($s: ID!) { cancelRun(sessionId: $s) { id } }`, sessionVar},
	"editMessage":       {`mutation($m: ID!) { editMessage(input: {messageId: $m, content: "again"}) { run { id } } }`, messageVar},
	"regenerate":        {`mutation($m: ID!) { regenerate(input: {messageId: $m}) { run { id } } }`, messageVar},
	"selectBranch":      {`mutation($m: ID!) { selectBranch(input: {messageId: $m}) { id } }`, messageVar},
	"forkSession":       {`mutation($m: ID!) { forkSession(input: {messageId: $m}) { id } }`, messageVar},
	"createShareLink":   {`mutation($s: ID!) { createShareLink(input: {sessionId: $s}) { token } }`, sessionVar},
	"revokeShareLink":   {`mutation($m: ID!) { revokeShareLink(id: $m) { id } }`, messageVar},
	"forkSharedSession": {`mutation { forkSharedSession(token: "no such token") { id } }`, nil},
	"createSchedule": {`mutation($s: ID!) { createSchedule(input: {content: "hi", sessionId: $s, cron: "0 9 * * *"}) { id } }`,
		sessionVar},
	"updateSchedule":  {`mutation($m: ID!) { updateSchedule(input: {id: $m, enabled: false}) { id } }`, messageVar},
	"deleteSchedule":  {`mutation($m: ID!) { deleteSchedule(id: $m) }`, messageVar},
	"runScheduleNow":  {`mutation($m: ID!) { runScheduleNow(id: $m) { id } }`, messageVar},
	"markSessionRead": {`mutation($s: ID!) { markSessionRead(sessionId: $s) { id } }`, sessionVar},
	"createWebhook": {`mutation { createWebhook(input: {url: "https://example.com/hook", events: ["run.completed"]}) { secret } }`,
		nil},
	"updateWebhook":       {`mutation($m: ID!) { updateWebhook(input: {id: $m, enabled: false}) { id } }`, messageVar},
	"deleteWebhook":       {`mutation($m: ID!) { deleteWebhook(id: $m) }`, messageVar},
	"rotateWebhookSecret": {`mutation($m: ID!) { rotateWebhookSecret(id: $m) { secret } }`, messageVar},
	"redeliverWebhook":    {`mutation($m: ID!) { redeliverWebhook(deliveryId: $m) { id } }`, messageVar},
}

// otherEdges are the operations that no mutation asks for, each with the edge that does:
// they go through the same door, but GraphQL does not offer them.
var otherEdges = map[string]string{
	"openThread": "POST /agui (AG-UI): a client's thread ID bound to a session",
}

func sessionVar(sid, _ string) map[string]any { return map[string]any{"s": sid} }
func messageVar(_, mid string) map[string]any { return map[string]any{"m": mid} }

// TestEveryMutationGoesThroughTheCommandDoor holds the schema to the service's table of
// operations: every mutation is an operation of its name, each call of one is counted by
// the service's one door (exec), and once the service shuts down every one is refused
// with UNAVAILABLE before it changes anything.
func TestEveryMutationGoesThroughTheCommandDoor(t *testing.T) {
	src, err := os.ReadFile("../schema.graphqls")
	if err != nil {
		t.Fatal(err)
	}
	schema, gerr := gqlparser.LoadSchema(&ast.Source{Name: "schema.graphqls", Input: string(src)})
	if gerr != nil {
		t.Fatal(gerr)
	}
	var mutations []string
	for _, f := range schema.Mutation.Fields {
		mutations = append(mutations, f.Name)
	}
	slices.Sort(mutations)
	var ops []string // the operations of GraphQL: every one but those of other edges
	for _, op := range service.Operations() {
		if _, other := otherEdges[op]; !other {
			ops = append(ops, op)
		}
	}
	if !slices.Equal(mutations, ops) {
		t.Fatalf("the schema's mutations %v, the service's operations %v (less those of other edges): every mutation is one operation of its name", mutations, ops)
	}
	for op := range otherEdges {
		if !slices.Contains(service.Operations(), op) {
			t.Fatalf("otherEdges names %s, which is no operation", op)
		}
	}
	for _, name := range mutations {
		if _, ok := mutationCalls[name]; !ok {
			t.Fatalf("no call of %s in mutationCalls: add one", name)
		}
	}

	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	mid, run := c.Send(sid, "hello")
	evs.Until("the run's end", tgtest.RunEnds(run))
	call := func(name string) *tgtest.Response {
		m := mutationCalls[name]
		var vars map[string]any
		if m.vars != nil {
			vars = m.vars(sid, mid)
		}
		return c.Do(m.doc, vars)
	}

	for _, name := range mutations {
		before := a.Service.Stats().Commands[name]
		call(name)
		if after := a.Service.Stats().Commands[name]; after != before+1 {
			t.Errorf("%s: the door counted %d commands of it, want %d", name, after, before+1)
		}
	}

	a.Service.Close()
	for _, name := range mutations {
		if r := call(name); r.Code() != "UNAVAILABLE" {
			t.Errorf("%s while the service shuts down: %s %+v, want UNAVAILABLE", name, r.Code(), r.Errors)
		}
	}
}
