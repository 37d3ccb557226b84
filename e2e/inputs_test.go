package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// The human-in-the-loop contract over real sockets, on every store: tool policies,
// approvals (approve, edit, reject), several inputs at once answered in parts and together,
// forms and their validation, expiry, stop, and what late or foreign answers get.

// pendingInputs is what a session shows it waits on.
type pendingInputs struct {
	Status           string
	PendingQuestions []struct {
		ID, Prompt, AnswerSchema, ExpiresAt string
		Choices                             []string
		Multiple                            bool
	}
	PendingApprovals []struct {
		ID, Name, Arguments, Status string
		Approval                    struct{ RequestedArguments, ExpiresAt string }
	}
}

func pendingOf(c *tgtest.Client, sid string) pendingInputs {
	c.T.Helper()
	var out struct{ Session pendingInputs }
	c.Must(`query($s: ID!){ session(id: $s){ status
		pendingQuestions { id prompt choices multiple answerSchema expiresAt }
		pendingApprovals { id name arguments status approval { requestedArguments expiresAt } } } }`, map[string]any{"s": sid}, &out)
	return out.Session
}

const decideMutation = `mutation($in: DecideToolCallInput!){ decideToolCall(input: $in){
	toolCall { id status arguments approval { requestedArguments decision reason decidedAt } } run { id status } } }`

func decide(c *tgtest.Client, in map[string]any) *tgtest.Response {
	c.T.Helper()
	return c.Do(decideMutation, map[string]any{"in": in})
}

const respondInputsMutation = `mutation($in: RespondToInputsInput!){ respondToInputs(input: $in){
	questions { id answer } toolCalls { id status } run { id status } } }`

func setPolicy(c *tgtest.Client, sid, tool, policy string) {
	c.T.Helper()
	var out struct {
		UpdateTalkSessionSettings struct {
			Settings struct {
				ToolPolicies []struct{ Tool, Policy string }
			}
		}
	}
	c.Must(`mutation($s: ID!, $t: String!, $p: ToolPolicyKind!){ updateTalkSessionSettings(input: {id: $s, settings: {toolPolicies: [{tool: $t, policy: $p}]}}){
		settings { toolPolicies { tool policy } } } }`, map[string]any{"s": sid, "t": tool, "p": policy}, &out)
	ps := out.UpdateTalkSessionSettings.Settings.ToolPolicies
	if len(ps) != 1 || ps[0].Tool != tool || ps[0].Policy != policy {
		c.T.Fatalf("tool policies after setting %s=%s: %+v", tool, policy, ps)
	}
}

// lastReply is the text of the session's last assistant message.
func lastReply(c *tgtest.Client, sid string) string {
	c.T.Helper()
	msgs := c.Messages(sid)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "ASSISTANT" && msgs[i].Kind == "TEXT" {
			return msgs[i].Content
		}
	}
	return ""
}

func TestToolPoliciesAndApprovals(t *testing.T) {
	for _, store := range allStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			a := startApp(t, store, nil)
			c := guest(t, a)

			// The agents and their tools, with the server's policies.
			var agents struct {
				Agents []struct {
					Name  string
					Tools []struct{ Name, Description, InputSchema, Policy string }
				}
			}
			c.Must(`{ agents { name tools { name description inputSchema policy } } }`, nil, &agents)
			var echo *struct{ Name, Description, InputSchema, Policy string }
			for _, ag := range agents.Agents {
				for i := range ag.Tools {
					if ag.Name == "demo" && ag.Tools[i].Name == "echo" {
						echo = &ag.Tools[i]
					}
				}
			}
			if echo == nil || echo.Policy != "ALLOW" || echo.Description == "" || !strings.Contains(echo.InputSchema, `"text"`) {
				t.Fatalf("the demo's echo tool as the agents query lists it: %+v", echo)
			}

			sid := c.CreateSession(nil)
			_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))

			t.Run("ALLOW runs at once", func(t *testing.T) {
				_, run := c.Send(sid, "/tool hello there")
				evs.Until("the run's end", tgtest.RunEnds(run))
				if got := lastReply(c, sid); got != "The echo tool printed: hello there" {
					t.Errorf("reply %q", got)
				}
			})

			t.Run("ASK waits, and an approval with edited arguments runs once with them", func(t *testing.T) {
				setPolicy(c, sid, "echo", "ASK")
				_, run := c.Send(sid, "/tool as asked")
				req := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
				call := req.ToolCall
				if call.Status != "AWAITING_APPROVAL" || call.Approval == nil || call.Approval.RequestedArguments != `{"text":"as asked"}` || call.Approval.ExpiresAt == "" {
					t.Fatalf("the call waiting for approval: %+v", call)
				}
				p := pendingOf(c, sid)
				if p.Status != "WAITING_FOR_INPUT" || len(p.PendingApprovals) != 1 || p.PendingApprovals[0].ID != call.ID || len(p.PendingQuestions) != 0 {
					t.Fatalf("the session while the call waits: %+v", p)
				}
				// Arguments that are not JSON, or do not fit the tool's schema, change nothing.
				for _, bad := range []struct{ args, want string }{{`{"text":`, "not JSON"}, {`{"text": 5}`, "/text"}, {`{"other":"x"}`, "input schema"}} {
					r := decide(c, map[string]any{"toolCallId": call.ID, "decision": "APPROVE", "arguments": bad.args})
					if r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, bad.want) {
						t.Errorf("approving with %s: %+v, want BAD_USER_INPUT naming %q", bad.args, r.Errors, bad.want)
					}
				}
				if p := pendingOf(c, sid); len(p.PendingApprovals) != 1 {
					t.Fatalf("refused decisions changed what waits: %+v", p)
				}
				var res struct {
					DecideToolCall struct {
						ToolCall struct {
							ID, Status, Arguments string
							Approval              struct{ RequestedArguments, Decision, DecidedAt string }
						}
						Run struct{ ID, Status string }
					}
				}
				c.Must(decideMutation, map[string]any{"in": map[string]any{"toolCallId": call.ID, "decision": "APPROVE", "arguments": `{"text":"as edited"}`}}, &res)
				got := res.DecideToolCall
				if got.ToolCall.Status != "RUNNING" || got.ToolCall.Arguments != `{"text":"as edited"}` || got.ToolCall.Approval.Decision != "APPROVE" ||
					got.ToolCall.Approval.RequestedArguments != `{"text":"as asked"}` || got.ToolCall.Approval.DecidedAt == "" || got.Run.ID != run {
					t.Fatalf("decideToolCall answered %+v", got)
				}
				decided := evs.Until("the decision", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalDecided" })
				if decided.ToolCall.ID != call.ID || decided.ToolCall.Approval.Decision != "APPROVE" {
					t.Errorf("ToolApprovalDecided: %+v", decided.ToolCall)
				}
				evs.Until("the run's end", tgtest.RunEnds(run))
				if got := lastReply(c, sid); got != "The echo tool printed: as edited" {
					t.Errorf("reply %q", got)
				}
				r := decide(c, map[string]any{"toolCallId": call.ID, "decision": "APPROVE"})
				if r.Code() != "CONFLICT" {
					t.Errorf("deciding a call again: %+v, want CONFLICT", r.Errors)
				}
			})

			t.Run("a rejection never runs the call, and the agent gets its reason", func(t *testing.T) {
				_, run := c.Send(sid, "/tool never")
				call := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" }).ToolCall
				r := decide(c, map[string]any{"toolCallId": call.ID, "decision": "REJECT", "reason": "not today"})
				if r.Code() != "" {
					t.Fatalf("rejecting: %+v", r.Errors)
				}
				evs.Until("the run's end", tgtest.RunEnds(run))
				if got := lastReply(c, sid); got != "The echo tool did not run: the user rejected this call: not today" {
					t.Errorf("reply %q", got)
				}
				var calls struct {
					Session struct {
						Messages struct {
							Edges []struct {
								Node struct {
									ToolCalls []struct {
										ID, Status, Output string
										Result             *string
										Approval           *struct{ Decision, Reason string }
									}
								}
							}
						}
					}
				}
				found := false
				c.Must(`query($s: ID!){ session(id: $s){ messages(last: 3){ edges { node { toolCalls { id status output result approval { decision reason } } } } } } }`, map[string]any{"s": sid}, &calls)
				for _, e := range calls.Session.Messages.Edges {
					for _, tc := range e.Node.ToolCalls {
						if tc.ID == call.ID {
							found = true
							if tc.Status != "REJECTED" || tc.Output != "" || tc.Result != nil || tc.Approval == nil || tc.Approval.Decision != "REJECT" || tc.Approval.Reason != "not today" {
								t.Errorf("the rejected call in the history: %+v", tc)
							}
						}
					}
				}
				if !found {
					t.Error("the rejected call is not in the history")
				}
			})

			t.Run("DENY refuses without asking; /approve asks even under ALLOW", func(t *testing.T) {
				setPolicy(c, sid, "echo", "DENY")
				_, run := c.Send(sid, "/approve anything")
				evs.Until("the run's end", tgtest.RunEnds(run))
				if got := lastReply(c, sid); !strings.Contains(got, "did not run") || !strings.Contains(got, "policy") {
					t.Errorf("reply under DENY %q", got)
				}
				setPolicy(c, sid, "echo", "ALLOW")
				_, run = c.Send(sid, "/approve please")
				call := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" }).ToolCall
				decide(c, map[string]any{"toolCallId": call.ID, "decision": "APPROVE"})
				evs.Until("the run's end", tgtest.RunEnds(run))
				if got := lastReply(c, sid); got != "The echo tool printed: please" {
					t.Errorf("reply %q", got)
				}
			})

			t.Run("another user's call is not found, and bad requests change nothing", func(t *testing.T) {
				setPolicy(c, sid, "echo", "ASK")
				_, run := c.Send(sid, "/tool mine")
				call := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" }).ToolCall
				other := guest(t, a)
				if r := decide(other, map[string]any{"toolCallId": call.ID, "decision": "APPROVE"}); r.Code() != "NOT_FOUND" {
					t.Errorf("another user's decision: %+v, want NOT_FOUND", r.Errors)
				}
				if r := decide(c, map[string]any{"toolCallId": "not-an-id", "decision": "APPROVE"}); r.Code() != "BAD_USER_INPUT" {
					t.Errorf("a malformed ID: %+v", r.Errors)
				}
				if r := decide(c, map[string]any{"toolCallId": call.ID, "decision": "REJECT", "arguments": "{}"}); r.Code() != "BAD_USER_INPUT" {
					t.Errorf("arguments with REJECT: %+v", r.Errors)
				}
				if p := pendingOf(c, sid); len(p.PendingApprovals) != 1 {
					t.Fatalf("refused decisions changed what waits: %+v", p)
				}
				c.Cancel(sid)
				end := evs.Until("the run's end", tgtest.RunEnds(run))
				if end.Run.Status != "CANCELLED" {
					t.Fatalf("stopped run ended %s", end.Run.Status)
				}
				withdrawn := evs.All[len(evs.All)-1]
				for _, e := range evs.All {
					if e.Typename == "ToolCallFinished" && e.ToolCall.ID == call.ID {
						withdrawn = e
					}
				}
				if withdrawn.ToolCall == nil || withdrawn.ToolCall.Status != "CANCELLED" || withdrawn.ToolCall.Approval == nil ||
					withdrawn.ToolCall.Approval.Decision != "" || withdrawn.ToolCall.Approval.Reason != "stopped" {
					t.Errorf("the call withdrawn by stop: %+v", withdrawn.ToolCall)
				}
				if r := decide(c, map[string]any{"toolCallId": call.ID, "decision": "APPROVE"}); r.Code() != "CONFLICT" {
					t.Errorf("a decision after stop: %+v, want CONFLICT", r.Errors)
				}
			})
		})
	}
}

func TestSeveralInputsAtOnce(t *testing.T) {
	for _, store := range allStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			a := startApp(t, store, nil)
			c := guest(t, a)
			sid := c.CreateSession(nil)
			_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))

			_, run := c.Send(sid, "/ask-many 3")
			var qs []string
			for len(qs) < 3 {
				e := evs.Until("a question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
				qs = append(qs, e.Question.ID)
			}
			p := pendingOf(c, sid)
			if p.Status != "WAITING_FOR_INPUT" || len(p.PendingQuestions) != 3 || p.PendingQuestions[0].Prompt != "Question 1 of 3" {
				t.Fatalf("the session with three questions: %+v", p)
			}
			// One answered on its own: the run still waits for the others.
			if r := answer(c, qs[1], "second"); len(r.Errors) > 0 {
				t.Fatal(r.Errors)
			}
			if p := pendingOf(c, sid); p.Status != "WAITING_FOR_INPUT" || len(p.PendingQuestions) != 2 {
				t.Fatalf("after one answer: %+v", p)
			}
			// All or none: a request with one that fails changes nothing, and names it.
			r := c.Do(respondInputsMutation, map[string]any{"in": map[string]any{"sessionId": sid, "answers": []map[string]any{
				{"questionId": qs[0], "answer": "first"}, {"questionId": qs[1], "answer": "again"}}}})
			if r.Code() != "CONFLICT" || !strings.Contains(r.Errors[0].Message, "answers[1]") {
				t.Fatalf("a request answering one twice: %+v, want CONFLICT naming answers[1]", r.Errors)
			}
			if p := pendingOf(c, sid); len(p.PendingQuestions) != 2 {
				t.Fatalf("a refused request changed what waits: %+v", p)
			}
			var res struct {
				RespondToInputs struct {
					Questions []struct{ ID, Answer string }
					Run       struct{ ID, Status string }
				}
			}
			c.Must(respondInputsMutation, map[string]any{"in": map[string]any{"sessionId": sid, "answers": []map[string]any{
				{"questionId": qs[2], "answer": "third"}, {"questionId": qs[0], "answer": "first"}}}}, &res)
			if len(res.RespondToInputs.Questions) != 2 || res.RespondToInputs.Run.Status != "RUNNING" {
				t.Fatalf("respondToInputs answered %+v", res.RespondToInputs)
			}
			evs.Until("the run's end", tgtest.RunEnds(run))
			if got := lastReply(c, sid); got != "Your answers: 1. first 2. second 3. third" {
				t.Errorf("reply %q", got)
			}
		})
	}
}

func TestFormsAreValidated(t *testing.T) {
	for _, store := range allStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			a := startApp(t, store, nil)
			c := guest(t, a)
			sid := c.CreateSession(nil)
			_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
			_, run := c.Send(sid, "/form")
			q := evs.Until("the form", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" }).Question
			var schema map[string]any
			if err := json.Unmarshal([]byte(q.AnswerSchema), &schema); err != nil || schema["type"] != "object" {
				t.Fatalf("the form's schema %q: %v", q.AnswerSchema, err)
			}
			for _, bad := range []struct{ answer, want string }{
				{`{"name":"Ada","age":-1}`, "/age"}, {`{"name":"Ada"}`, "age"}, {`not json`, "not JSON"}, {`{"name":"","age":3}`, "/name"}} {
				r := answer(c, q.ID, bad.answer)
				if r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, bad.want) {
					t.Errorf("answer %s: %+v, want BAD_USER_INPUT naming %q", bad.answer, r.Errors, bad.want)
				}
			}
			if p := pendingOf(c, sid); len(p.PendingQuestions) != 1 {
				t.Fatalf("refused answers changed what waits: %+v", p)
			}
			if r := answer(c, q.ID, `{"name":"Ada","age":36}`); len(r.Errors) > 0 {
				t.Fatal(r.Errors)
			}
			evs.Until("the run's end", tgtest.RunEnds(run))
			if got := lastReply(c, sid); !strings.HasPrefix(got, "Hello Ada, aged 36.") {
				t.Errorf("reply %q", got)
			}
		})
	}
}

// Nothing waits forever: an input expires, the agent is told and goes on, and a late
// answer or decision is a CONFLICT.
func TestInputsExpire(t *testing.T) {
	t.Parallel()
	a := startApp(t, "sqlite", func(c *app.Config) { c.Service.InputExpiry = 300 * time.Millisecond })
	c := guest(t, a)
	sid := c.CreateSession(nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))

	_, run := c.Send(sid, "/approve late")
	call := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" }).ToolCall
	ended := evs.Until("the call's end", func(e tgtest.Event) bool { return e.Typename == "ToolCallFinished" && e.ToolCall.ID == call.ID })
	if ended.ToolCall.Status != "CANCELLED" || ended.ToolCall.Approval == nil || ended.ToolCall.Approval.Reason != "expired" || ended.ToolCall.Approval.Decision != "" {
		t.Fatalf("the expired call: %+v", ended.ToolCall)
	}
	evs.Until("the run's end", tgtest.RunEnds(run))
	if got := lastReply(c, sid); got != "The echo tool did not run: this call was not run: expired" {
		t.Errorf("reply %q", got)
	}
	if r := decide(c, map[string]any{"toolCallId": call.ID, "decision": "APPROVE"}); r.Code() != "CONFLICT" {
		t.Errorf("a late decision: %+v, want CONFLICT", r.Errors)
	}

	_, run = c.Send(sid, "/ask anyone?")
	q := evs.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" }).Question
	w := evs.Until("the withdrawal", func(e tgtest.Event) bool { return e.Typename == "QuestionWithdrawn" }).Question
	if w.ID != q.ID || !w.Withdrawn || w.WithdrawnReason != "expired" {
		t.Fatalf("the expired question: %+v", w)
	}
	evs.Until("the run's end", tgtest.RunEnds(run))
	if r := answer(c, q.ID, "too late"); r.Code() != "CONFLICT" {
		t.Errorf("a late answer: %+v, want CONFLICT", r.Errors)
	}
}

// Two decisions on one call at once, from two connections: exactly one wins, the other is
// a CONFLICT, and the call runs once (never, when the rejection wins). An answer racing a
// stop either lands before it or is a CONFLICT; the run ends either way.
func TestInputRaces(t *testing.T) {
	t.Parallel()
	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	c2 := c.On(a.URL)
	sid := c.CreateSession(nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	won := map[string]int{}
	for round := range 8 {
		text := fmt.Sprintf("round %d", round)
		_, run := c.Send(sid, "/approve "+text)
		call := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" }).ToolCall
		decisions := []string{"APPROVE", "REJECT"}
		var wg sync.WaitGroup
		codes, errs := make([]string, 2), make([]error, 2)
		for i, cl := range []*tgtest.Client{c, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := cl.Try(decideMutation, map[string]any{"in": map[string]any{"toolCallId": call.ID, "decision": decisions[i]}})
				if err != nil {
					errs[i] = err
					return
				}
				codes[i] = r.Code()
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: the %s: %v", round, decisions[i], err)
			}
		}
		if (codes[0] == "") == (codes[1] == "") || (codes[0] != "" && codes[0] != "CONFLICT") || (codes[1] != "" && codes[1] != "CONFLICT") {
			t.Fatalf("round %d: two decisions answered %q: want one success and one CONFLICT", round, codes)
		}
		winner := decisions[1]
		if codes[0] == "" {
			winner = decisions[0]
		}
		won[winner]++
		if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("round %d: the run ended %s: %s", round, end.Run.Status, end.Run.Error)
		}
		// What the call did, as the stream shows it: its decision, what each execution
		// printed, its end. Approved, echo prints the text once and finishes COMPLETED;
		// rejected, it ends REJECTED with its decision and prints nothing.
		var decided []*tgtest.ToolCall
		var output strings.Builder
		var finished []tgtest.ToolCall
		for _, e := range evs.All {
			switch {
			case e.Typename == "ToolApprovalDecided" && e.ToolCall.ID == call.ID:
				decided = append(decided, e.ToolCall)
			case e.Typename == "ToolCallOutput" && e.ToolCallID == call.ID:
				output.WriteString(e.Delta)
			case e.Typename == "ToolCallFinished" && e.ToolCall.ID == call.ID:
				finished = append(finished, *e.ToolCall)
			}
		}
		if len(decided) != 1 || decided[0].Approval.Decision != winner {
			t.Fatalf("round %d: decisions recorded %+v, want the winner's alone, %s", round, decided, winner)
		}
		switch winner {
		case "APPROVE":
			if output.String() != text || len(finished) != 1 || finished[0].Status != "COMPLETED" || finished[0].Output != text {
				t.Fatalf("round %d: approved, the call printed %q and finished %d times (%+v); want it to run once", round, output.String(), len(finished), finished)
			}
		case "REJECT":
			if output.Len() > 0 || len(finished) != 0 || decided[0].Status != "REJECTED" {
				t.Fatalf("round %d: rejected, the call is %s, printed %q and finished %d times (%+v); want it never to run", round, decided[0].Status, output.String(), len(finished), finished)
			}
		}
	}
	t.Logf("the first decision won %d of 8 rounds", won["APPROVE"])
	for round := range 5 {
		_, run := c.Send(sid, "/ask quick?")
		q := evs.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" }).Question
		var wg sync.WaitGroup
		var code string
		var err error
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r *tgtest.Response
			if r, err = c2.Try(`mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"now"}){ run { id } } }`, map[string]any{"q": q.ID}); err == nil {
				code = r.Code()
			}
		}()
		c.Cancel(sid)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: the answer: %v", round, err)
		}
		end := evs.Until("the run's end", tgtest.RunEnds(run))
		if code != "" && code != "CONFLICT" {
			t.Fatalf("round %d: an answer racing stop: %s", round, code)
		}
		if code == "CONFLICT" && end.Run.Status != "CANCELLED" {
			t.Fatalf("round %d: the answer was refused, yet the run ended %s", round, end.Run.Status)
		}
		answered := slices.ContainsFunc(evs.All, func(e tgtest.Event) bool {
			return e.Typename == "QuestionAnswered" && e.Question.ID == q.ID && e.Question.Answer == "now"
		})
		if answered != (code == "") {
			t.Fatalf("round %d: the answer got code %q, and the stream shows it taken: %v", round, code, answered)
		}
	}
}
