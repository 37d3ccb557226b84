package e2e

// What replicas decide together through the store: a schedule due while several run fires
// once, and runs on two replicas spend a user's budget without going over it by more than
// one call.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

func TestReplicasFireAScheduleOnce(t *testing.T) {
	rs := newReplicaSet(t, setOptions{n: 2})
	c := tgtest.Guest(t, rs.reps[0].URL)
	const n = 10
	at := time.Now().Add(3 * time.Second).UTC()
	sids := map[string]string{}
	for i := range n {
		sid := c.CreateSession(nil)
		var out struct{ CreateSchedule struct{ ID string } }
		c.Must(`mutation($s: ID!, $at: Time!, $c: String!) { createSchedule(input: {content: $c, sessionId: $s, at: $at}) { id } }`,
			map[string]any{"s": sid, "at": at.Format(time.RFC3339Nano), "c": fmt.Sprint("fire ", i)}, &out)
		sids[out.CreateSchedule.ID] = sid
	}
	// Both replicas look every second; each instant fires on one of them, once.
	eventually(t, tgtest.Wait, "every schedule's fire", func() bool {
		for _, sc := range schedulesOf(c) {
			if len(sc.Fires.Edges) == 0 || sc.Fires.Edges[0].Node.FiredAt == nil {
				return false
			}
		}
		return true
	})
	for _, sc := range schedulesOf(c.On(rs.reps[1].URL)) {
		if got := outcomesOf(sc); len(got) != 1 || got[0] != "STARTED" {
			t.Errorf("schedule %s: fires %q, want one STARTED", sc.ID, got)
		}
		if m := userMessages(c, sids[sc.ID]); m != 1 {
			t.Errorf("schedule %s: %d messages sent, want 1", sc.ID, m)
		}
	}
}

func TestReplicasNeverOvershootAUsersBudget(t *testing.T) {
	// Every request costs 23 tokens (20 read, 3 written); the user may spend 200.
	// Each takes a while, so that the two sessions' requests are under way together.
	f := fakellm.New(t)
	reply := fakellm.TextReply("a ", "b ", "c.")
	for range 30 {
		f.Add(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(150 * time.Millisecond): // a model's time to answer
			case <-r.Context().Done():
				return
			}
			reply(w, r)
		})
	}
	rs := newReplicaSet(t, setOptions{n: 2, env: []string{"OPENAI_BASE_URL=" + f.URL + "/v1", "OPENAI_API_KEY=" + llmKey,
		"OPENAI_MODEL=gpt-budget", "USER_TOKEN_BUDGET=200", "RUNS_PER_USER=4"}})
	c := tgtest.Guest(t, rs.reps[0].URL)
	var wg sync.WaitGroup
	for i, r := range rs.reps {
		cc := c.On(r.URL)
		sid := openAISession(cc, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Messages one after another until the budget refuses one or holds a run.
			for j := 0; ; j++ {
				resp := cc.Do(`mutation($s: ID!, $c: String!) { addMessage(input: {sessionId: $s, content: $c}) { run { id } } }`,
					map[string]any{"s": sid, "c": fmt.Sprintf("message %d of session %d", j, i)})
				if resp.Code() == "BUDGET_EXCEEDED" {
					return
				}
				var added struct {
					AddMessage struct{ Run struct{ ID string } }
				}
				if err := json.Unmarshal(resp.Data, &added); err != nil || len(resp.Errors) > 0 {
					t.Errorf("addMessage: %v %+v", err, resp.Errors)
					return
				}
				var run struct{ Run struct{ Status string } }
				eventually(t, tgtest.Wait, "the run's end or pause", func() bool {
					cc.Must(`query($r: ID!) { run(id: $r) { status } }`, map[string]any{"r": added.AddMessage.Run.ID}, &run)
					return run.Run.Status == "COMPLETED" || run.Run.Status == "WAITING_FOR_INPUT" || run.Run.Status == "FAILED"
				})
				if run.Run.Status != "COMPLETED" {
					return // held by the budget: the other replica's run spent the rest
				}
			}
		}()
	}
	wg.Wait()
	var v struct {
		Viewer struct {
			Usage struct{ InputTokens, OutputTokens int }
		}
	}
	c.Must(`{ viewer { usage { inputTokens outputTokens } } }`, nil, &v)
	used := v.Viewer.Usage.InputTokens + v.Viewer.Usage.OutputTokens
	calls := len(f.Requests())
	t.Logf("%d tokens in %d calls", used, calls)
	if used < 200 || used > 200+23 || used != 23*calls {
		t.Errorf("two replicas against a cap of 200: %d tokens in %d calls; want at least 200 and at most one call (23) over", used, calls)
	}
}
