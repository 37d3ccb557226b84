package service_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

// spender is an agent that calls a model n times (n its last message), each call weighed
// against the budgets first and costing 10 tokens; calls counts the calls it made.
type spender struct{ calls atomic.Int64 }

func (s *spender) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	n, _ := strconv.Atoi(strings.TrimSpace(req.History[len(req.History)-1].Content))
	for range n {
		if err := out.BeforeModelCall(ctx, 10); err != nil {
			return err
		}
		s.calls.Add(1)
		if err := out.Text("call "); err != nil {
			return err
		}
		if err := out.ReportUsage("m", service.Usage{InputTokens: 6, OutputTokens: 4}); err != nil {
			return err
		}
	}
	return nil
}

func budgetReached(t *testing.T, svc *service.Service, ctx context.Context, id string) bool {
	t.Helper()
	reached, err := svc.BudgetReached(ctx, view(t, svc, ctx, id))
	if err != nil {
		t.Fatal(err)
	}
	return reached
}

func sessionTokens(t *testing.T, svc *service.Service, ctx context.Context, id string) int64 {
	t.Helper()
	u, err := svc.SessionUsage(ctx, view(t, svc, ctx, id))
	if err != nil {
		t.Fatal(err)
	}
	return u.Tokens()
}

func waitsFor(scope service.BudgetScope) func(*service.Event) bool {
	return func(ev *service.Event) bool {
		return ev.Type == service.EventRunStatusChanged && ev.Run.Status == service.RunWaitingForInput && ev.Run.Budget == scope
	}
}

func TestSessionBudgetPausesBeforeTheNextCallAndRaisingItResumesTheRun(t *testing.T) {
	sp := &spender{}
	svc := start(t, setup{agents: map[string]service.Runner{"spender": sp}})
	v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("spender"), TokenBudget: ptr((25))})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, svc, alice, v.ID, v.StreamCursor)
	// 0, 10 and 20 of 25 leave room: the third call is the one that goes over.
	_, run := send(t, svc, alice, v.ID, "5")
	evs := f.until(waitsFor(service.BudgetSession))
	if got := sp.calls.Load(); got != 3 {
		t.Fatalf("%d calls made before the cap of 25 at 10 a call; want 3", got)
	}
	cv := view(t, svc, alice, v.ID)
	if cv.Status != service.SessionWaitingForInput || cv.ActiveRun.ID != run.ID || cv.ActiveRun.Budget != service.BudgetSession {
		t.Fatalf("the session: %s, run %+v; want it waiting for its budget", cv.Status, cv.ActiveRun)
	}
	if !budgetReached(t, svc, alice, v.ID) || sessionTokens(t, svc, alice, v.ID) != 30 {
		t.Errorf("budgetReached %v with %d tokens; want true, 30", budgetReached(t, svc, alice, v.ID), sessionTokens(t, svc, alice, v.ID))
	}
	if reply := replyOf(t, evs, run.ID); reply.Status != service.MessageComplete || reply.Content != "call call call " {
		t.Errorf("the reply so far: %q %s, want it complete", reply.Content, reply.Status)
	}
	// A cap still under the usage changes nothing; one above it lets the same run go on.
	if _, err := svc.UpdateSettings(alice, v.ID, service.SettingsInput{TokenBudget: ptr((30))}); err != nil {
		t.Fatal(err)
	}
	if got := view(t, svc, alice, v.ID); got.Status != service.SessionWaitingForInput || sp.calls.Load() != 3 {
		t.Errorf("a cap of 30 over 30 used: %s after %d calls; want still waiting after 3", got.Status, sp.calls.Load())
	}
	if _, err := svc.UpdateSettings(alice, v.ID, service.SettingsInput{TokenBudget: ptr((0))}); err != nil {
		t.Fatal(err)
	}
	evs = f.until(runEnds(run.ID))
	if end := lastEnd(t, evs); end.Status != service.RunCompleted || end.Budget != "" {
		t.Errorf("the run: %s (budget %q); want COMPLETED", end.Status, end.Budget)
	}
	if got := sp.calls.Load(); got != 5 {
		t.Errorf("%d calls in all; want 5", got)
	}
	if budgetReached(t, svc, alice, v.ID) || sessionTokens(t, svc, alice, v.ID) != 50 {
		t.Errorf("without a cap: budgetReached %v, %d tokens; want false, 50", budgetReached(t, svc, alice, v.ID), sessionTokens(t, svc, alice, v.ID))
	}
}

func TestBudgetWaitEndsWithStop(t *testing.T) {
	svc := start(t, setup{agents: map[string]service.Runner{"spender": &spender{}}})
	v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("spender"), TokenBudget: ptr((10))})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, svc, alice, v.ID, v.StreamCursor)
	_, run := send(t, svc, alice, v.ID, "2")
	f.until(waitsFor(service.BudgetSession))
	if _, err := svc.CancelRun(alice, v.ID); err != nil {
		t.Fatal(err)
	}
	if end := lastEnd(t, f.until(runEnds(run.ID))); end.Status != service.RunCancelled || end.Budget != "" {
		t.Errorf("the run stopped: %s (budget %q); want CANCELLED", end.Status, end.Budget)
	}
	if got := view(t, svc, alice, v.ID); got.Status != service.SessionIdle || !budgetReached(t, svc, alice, v.ID) {
		t.Errorf("the session: %s; want IDLE, its budget still reached", got.Status)
	}
}

func TestUserBudgetRefusesNewMessagesStoringNothing(t *testing.T) {
	svc := start(t, setup{agents: map[string]service.Runner{"spender": &spender{}},
		config: func(cfg *service.Config) { cfg.UserTokenBudget = 20 }})
	v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("spender")})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, svc, alice, v.ID, v.StreamCursor)
	_, run := send(t, svc, alice, v.ID, "2")
	f.until(runEnds(run.ID))
	before := len(history(t, svc, alice, v.ID))
	_, _, err = svc.AddMessage(alice, v.ID, "more", "key")
	wantCode(t, "a message once the user's 20 tokens are spent", err, service.EBUDGET)
	if after := len(history(t, svc, alice, v.ID)); after != before {
		t.Errorf("%d messages after the refusal, %d before", after, before)
	}
	b, err := svc.ViewerBudget(alice)
	if err != nil {
		t.Fatal(err)
	}
	if b.Usage.Tokens() != 20 || b.Limit == nil || *b.Limit != 20 || b.ResetsAt == nil || !b.ResetsAt.After(time.Now()) {
		t.Errorf("the viewer's budget: %+v", b)
	}
	if other, _ := svc.ViewerBudget(bob); other.Usage.Tokens() != 0 {
		t.Errorf("bob's usage: %d", other.Usage.Tokens())
	}
	bv := newSession(t, svc, bob, "", "")
	send(t, svc, bob, bv.ID, "bob is not held by alice's budget")
}

func TestUserBudgetWaitEndsWhenThePeriodTurns(t *testing.T) {
	// A clock a second and a half before a UTC midnight, which runs.
	now := time.Now()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	skew := midnight.Add(-1500 * time.Millisecond).Sub(now)
	sp := &spender{}
	svc := start(t, setup{agents: map[string]service.Runner{"spender": sp}, config: func(cfg *service.Config) {
		cfg.Clock = func() time.Time { return time.Now().Add(skew) }
		cfg.UserTokenBudget, cfg.UserBudgetPeriod = 10, "day"
	}})
	v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("spender")})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, svc, alice, v.ID, v.StreamCursor)
	_, run := send(t, svc, alice, v.ID, "2")
	f.until(waitsFor(service.BudgetUser))
	if got := view(t, svc, alice, v.ID); !budgetReached(t, svc, alice, v.ID) || got.ActiveRun.Budget != service.BudgetUser {
		t.Errorf("the session: %+v; want its run waiting for the user's budget", got.ActiveRun)
	}
	if end := lastEnd(t, f.until(runEnds(run.ID))); end.Status != service.RunCompleted {
		t.Errorf("after midnight the run ended %s; want COMPLETED", end.Status)
	}
	if got := sp.calls.Load(); got != 2 {
		t.Errorf("%d calls; want 2", got)
	}
}

func TestRunsInParallelNeverOvershootTheUsersCap(t *testing.T) {
	store, err := sqlite.Open(context.Background(), t.TempDir()+"/db", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sp := &spender{}
	svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"spender": sp},
		config: func(cfg *service.Config) { cfg.UserTokenBudget = 95; cfg.RunsPerUser = 4 }})
	var wg sync.WaitGroup
	for range 4 {
		v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("spender")})
		if err != nil {
			t.Fatal(err)
		}
		f := follow(t, svc, alice, v.ID, v.StreamCursor)
		send(t, svc, alice, v.ID, "20")
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.until(waitsFor(service.BudgetUser))
		}()
	}
	wg.Wait()
	b, err := svc.ViewerBudget(alice)
	if err != nil {
		t.Fatal(err)
	}
	// 90 leaves room for one more call of 10; 100 does not.
	if got := b.Usage.Tokens(); got != 100 || sp.calls.Load() != 10 {
		t.Errorf("four runs against a cap of 95: %d tokens in %d calls; want 100 in 10", got, sp.calls.Load())
	}
}

func TestBudgetWaitsSurviveARestart(t *testing.T) {
	store := inmem.New()
	day := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	clock := &clock{now: day}
	config := func(cfg *service.Config) {
		cfg.Clock, cfg.UserTokenBudget, cfg.UserBudgetPeriod = clock.Now, 25, "day"
	}
	sp := &spender{}
	svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"spender": sp}, config: config})
	capped, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("spender"), TokenBudget: ptr(10)})
	if err != nil {
		t.Fatal(err)
	}
	free := newSession(t, svc, alice, "spender", "")
	fc, ff := follow(t, svc, alice, capped.ID, capped.StreamCursor), follow(t, svc, alice, free.ID, free.StreamCursor)
	_, cappedRun := send(t, svc, alice, capped.ID, "2")
	fc.until(waitsFor(service.BudgetSession))
	_, freeRun := send(t, svc, alice, free.ID, "3")
	ff.until(waitsFor(service.BudgetUser)) // 10 + 20 of the user's 25
	afterCapped, afterFree := fc.cursor(capped.ID), ff.cursor(free.ID)
	svc.Close()

	// The next start finds both waiting; the day has turned meanwhile.
	clock.set(day.Add(24 * time.Hour))
	svc, _ = startService(t, setup{store: store, agents: map[string]service.Runner{"spender": sp}, config: config})
	fc, ff = follow(t, svc, alice, capped.ID, afterCapped), follow(t, svc, alice, free.ID, afterFree)
	if end := lastEnd(t, ff.until(runEnds(freeRun.ID))); end.Status != service.RunCompleted {
		t.Errorf("the run held by the user's budget, after the day turned: %s, want COMPLETED", end.Status)
	}
	v := view(t, svc, alice, capped.ID)
	if v.Status != service.SessionWaitingForInput || v.ActiveRun == nil || v.ActiveRun.ID != cappedRun.ID || v.ActiveRun.Budget != service.BudgetSession {
		t.Fatalf("the session held by its own budget after the restart: %s %+v", v.Status, v.ActiveRun)
	}
	if _, err := svc.UpdateSettings(alice, capped.ID, service.SettingsInput{TokenBudget: ptr(1000)}); err != nil {
		t.Fatal(err)
	}
	if end := lastEnd(t, fc.until(runEnds(cappedRun.ID))); end.Status != service.RunCompleted {
		t.Errorf("the run held by its session's budget, raised after the restart: %s, want COMPLETED", end.Status)
	}
}
