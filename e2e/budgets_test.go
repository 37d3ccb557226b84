package e2e

// Token budgets through the whole server: a session's cap that the user sets, the user's
// cap per period that the operator sets, and the refusal of new messages.

import (
	"testing"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// budgetState is a session as the budget tests read it.
type budgetState struct {
	Status        string
	BudgetReached bool
	ActiveRun     *struct {
		ID             string
		Status         string
		WaitsForBudget *string
	}
	Usage    struct{ InputTokens, OutputTokens int }
	Messages struct {
		Edges []struct {
			Node struct{ Role, Content string }
		}
	}
}

func budgetOf(c *tgtest.Client, sid string) budgetState {
	c.T.Helper()
	var out struct{ Session budgetState }
	c.Must(`query($s: ID!) { session(id: $s) { status budgetReached activeRun { id status waitsForBudget }
		usage { inputTokens outputTokens } messages(last: 100) { edges { node { role content } } } } }`, map[string]any{"s": sid}, &out)
	return out.Session
}

func TestBudgetPausesTheOpenAIAgentBeforeItsNextCall(t *testing.T) {
	// Each request costs 23 tokens: 20 read, 3 written.
	f := fakellm.New(t, fakellm.TextReply("One ", "two ", "three."), fakellm.TextReply("Four ", "five ", "six."))
	a := startOpenAI(t, "sqlite", f, func(c *app.Config) { c.OpenAI.Model = "gpt-budget" })
	c := guest(t, a)
	sid := openAISession(c, map[string]any{"tokenBudget": 23})
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	_, first := c.Send(sid, "count")
	evs.Until("the first run's end", tgtest.RunEnds(first))
	if s := budgetOf(c, sid); !s.BudgetReached || s.Usage.InputTokens != 20 || s.Usage.OutputTokens != 3 {
		t.Fatalf("after a call of 23 under a cap of 23: %+v, want budgetReached and the usage the provider reported", s)
	}
	// The next message is taken, and its run waits before it calls the model.
	_, second := c.Send(sid, "count on")
	evs.Until("the run waits", func(ev tgtest.Event) bool {
		return ev.Typename == "RunStatusChanged" && ev.Run.ID == second && ev.Run.Status == "WAITING_FOR_INPUT"
	})
	s := budgetOf(c, sid)
	if s.Status != "WAITING_FOR_INPUT" || s.ActiveRun == nil || s.ActiveRun.ID != second || s.ActiveRun.WaitsForBudget == nil ||
		*s.ActiveRun.WaitsForBudget != "SESSION" || !s.BudgetReached {
		t.Fatalf("the session: %+v, want its run waiting for the session's budget", s)
	}
	if n := len(f.Requests()); n != 1 {
		t.Fatalf("the model was called %d times; want once, the run held before its call", n)
	}
	// Raising the cap lets the same run call the model.
	c.Must(`mutation($s: ID!) { updateTalkSessionSettings(input: {id: $s, settings: {tokenBudget: 1000}}) { id } }`,
		map[string]any{"s": sid}, nil)
	if end := evs.Until("the second run's end", tgtest.RunEnds(second)); end.Run.Status != "COMPLETED" {
		t.Fatalf("the run ended %s (%s)", end.Run.Status, end.Run.Error)
	}
	s = budgetOf(c, sid)
	if n := len(f.Requests()); n != 2 || s.BudgetReached || s.Usage.InputTokens != 40 || s.Usage.OutputTokens != 6 {
		t.Errorf("after raising the cap: %d calls, %+v; want 2 calls, 46 tokens, not reached", n, s)
	}
	if last := s.Messages.Edges[len(s.Messages.Edges)-1].Node; last.Content != "Four five six." {
		t.Errorf("the reply: %q", last.Content)
	}
}

func TestUserBudgetExceededStoresNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, func(c *app.Config) { c.Service.UserTokenBudget = 4 })
		c := guest(t, a)
		sid := c.CreateSession(nil)
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "hello") // the demo reads 1 word and writes 3 ("You said: hello")
		evs.Until("the run's end", tgtest.RunEnds(run))
		var v struct {
			Viewer struct {
				Usage          struct{ InputTokens, OutputTokens int }
				TokenBudget    *int
				BudgetResetsAt *string
			}
		}
		c.Must(`{ viewer { usage { inputTokens outputTokens } tokenBudget budgetResetsAt } }`, nil, &v)
		if u := v.Viewer; u.Usage.InputTokens != 1 || u.Usage.OutputTokens != 3 || u.TokenBudget == nil || *u.TokenBudget != 4 || u.BudgetResetsAt == nil {
			t.Fatalf("the viewer: %+v", u)
		}
		before := len(budgetOf(c, sid).Messages.Edges)
		r := c.Do(`mutation($s: ID!) { addMessage(input: {sessionId: $s, content: "more", idempotencyKey: "k"}) { run { id } } }`,
			map[string]any{"s": sid})
		if r.Code() != "BUDGET_EXCEEDED" {
			t.Fatalf("a message over the user's budget: %s %+v; want BUDGET_EXCEEDED", r.Code(), r.Errors)
		}
		if after := len(budgetOf(c, sid).Messages.Edges); after != before {
			t.Errorf("%d messages after the refusal, %d before", after, before)
		}
		other := guest(t, a)
		other.Send(other.CreateSession(nil), "another user is not held")
	})
}
