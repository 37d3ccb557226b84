package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// budgetTests check UsageStore and the Spend of a batch.
var budgetTests = []struct {
	name string
	fn   func(t *testing.T, s service.Store)
}{
	{"Usage/zero for a session or a user with none", testUsageZero},
	{"Append/a spend counts for the session and for the user's period", testSpendCounts},
	{"Reserve/grants while usage and holds leave room, refuses once used or held", testReserve},
	{"Reserve/a spend settles its hold; a lapsed hold holds nothing", testReserveSettles},
	{"Reserve/concurrent reservations never grant beyond the room", testReserveConcurrent},
	{"Append/deleting a session deletes its usage and holds, not its user's usage", testSpendDelete},
	{"Append/a run's budget round-trips", testRunBudget},
}

func spent(id, user string, in, out int, holds ...string) *service.Batch {
	return &service.Batch{SessionID: id, Spend: &service.Spend{UserID: user, Period: "2026-03",
		Usage: service.Usage{InputTokens: in, OutputTokens: out}, Holds: holds}}
}

func usageOf(t *testing.T, s service.Store, session, user string) (sess, usr int64) {
	t.Helper()
	su, err := s.SessionUsage(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	uu, err := s.UserUsage(t.Context(), user, "2026-03")
	if err != nil {
		t.Fatal(err)
	}
	return su.Tokens(), uu.Tokens()
}

func testUsageZero(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	if sess, usr := usageOf(t, s, "s1", "u1"); sess != 0 || usr != 0 {
		t.Errorf("usage of a session and a user that spent nothing: %d, %d; want 0, 0", sess, usr)
	}
	if sess, _ := usageOf(t, s, "missing", "nobody"); sess != 0 {
		t.Errorf("usage of a missing session: %d; want 0", sess)
	}
}

func testSpendCounts(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	create(t, s, newSession("s2", "u1", t0))
	mustAppend(t, s, spent("s1", "u1", 10, 5), spent("s2", "u1", 1, 2))
	mustAppend(t, s, spent("s1", "u1", 100, 0))
	su, err := s.SessionUsage(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "session s1's usage", su, service.Usage{InputTokens: 110, OutputTokens: 5})
	uu, err := s.UserUsage(t.Context(), "u1", "2026-03")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "user u1's usage in 2026-03", uu, service.Usage{InputTokens: 111, OutputTokens: 7})
	if other, _ := s.UserUsage(t.Context(), "u1", "2026-04"); other.Tokens() != 0 {
		t.Errorf("usage in another period: %d; want 0", other.Tokens())
	}
	wantCode(t, "a spend to a missing session", appendOne(s, spent("missing", "u1", 1, 1)), service.ENOTFOUND)
}

func reservation(id, session string, sessionCap, userCap, tokens int64) *service.Reservation {
	return &service.Reservation{ID: id, SessionID: session, UserID: "u1", Period: "2026-03", SessionCap: sessionCap,
		UserCap: userCap, Tokens: tokens, Now: t0, Until: t0.Add(time.Minute)}
}

func reserve(t *testing.T, s service.Store, r *service.Reservation) *service.BudgetRefusal {
	t.Helper()
	refusal, err := s.Reserve(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	return refusal
}

func testReserve(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	create(t, s, newSession("s2", "u1", t0))
	if r := reserve(t, s, reservation("h1", "s1", 0, 0, 1000)); r != nil {
		t.Errorf("a reservation without caps: refused %+v", r)
	}
	mustAppend(t, s, spent("s1", "u1", 50, 0, "h1"))
	if r := reserve(t, s, reservation("h2", "s1", 100, 0, 30)); r != nil {
		t.Errorf("50 used of 100, holding 30: refused %+v", r)
	}
	r := reserve(t, s, reservation("h3", "s1", 100, 0, 1))
	wantEqual(t, "50 used and 30 held of 100, holding 1 more: granted (80 < 100)", r, (*service.BudgetRefusal)(nil))
	r = reserve(t, s, reservation("h4", "s1", 81, 0, 1))
	wantEqual(t, "a cap of 81 with 50 used and 31 held", r, &service.BudgetRefusal{Scope: service.BudgetSession, Used: 81, Cap: 81})
	mustAppend(t, s, spent("s1", "u1", 40, 0, "h2", "h3"))
	r = reserve(t, s, reservation("h5", "s1", 90, 0, 1))
	wantEqual(t, "90 used of 90", r, &service.BudgetRefusal{Scope: service.BudgetSession, Reached: true, Used: 90, Cap: 90})
	// The user's cap counts every session of theirs.
	r = reserve(t, s, reservation("h6", "s2", 0, 90, 1))
	wantEqual(t, "the user's 90 of 90 used in another session", r, &service.BudgetRefusal{Scope: service.BudgetUser, Reached: true, Used: 90, Cap: 90})
	if r := reserve(t, s, reservation("h7", "s2", 0, 91, 1)); r != nil {
		t.Errorf("90 of the user's 91: refused %+v", r)
	}
	// The session's cap is weighed first.
	r = reserve(t, s, reservation("h8", "s1", 90, 90, 1))
	if r == nil || r.Scope != service.BudgetSession {
		t.Errorf("both caps reached: refused %+v, want the session's", r)
	}
}

func testReserveSettles(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	if r := reserve(t, s, reservation("h1", "s1", 100, 0, 100)); r != nil {
		t.Fatalf("refused %+v", r)
	}
	if r := reserve(t, s, reservation("h2", "s1", 100, 0, 1)); r == nil || r.Reached {
		t.Errorf("100 held of 100: %+v, want refused, not reached", r)
	}
	mustAppend(t, s, spent("s1", "u1", 10, 0, "h1"))
	if r := reserve(t, s, reservation("h3", "s1", 100, 0, 50)); r != nil {
		t.Errorf("once the hold of 100 settled at 10: refused %+v", r)
	}
	later := reservation("h4", "s1", 100, 0, 50)
	later.Now, later.Until = t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	if r := reserve(t, s, later); r != nil {
		t.Errorf("once the hold of 50 lapsed: refused %+v", r)
	}
}

func testReserveConcurrent(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	const n = 10
	var wg sync.WaitGroup
	granted := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := reservation(string(rune('a'+i)), "s1", 0, 100, 30)
			refusal, err := s.Reserve(t.Context(), r)
			if err != nil {
				t.Error(err)
			} else if refusal == nil {
				granted <- r.ID
			}
		}()
	}
	wg.Wait()
	close(granted)
	// 0, 30, 60 and 90 held leave room under 100; 120 does not.
	if got := len(granted); got != 4 {
		t.Errorf("%d of %d reservations of 30 under a cap of 100 were granted; want 4", got, n)
	}
}

func testSpendDelete(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	mustAppend(t, s, spent("s1", "u1", 10, 10))
	if r := reserve(t, s, reservation("h1", "s1", 0, 100, 70)); r != nil {
		t.Fatalf("refused %+v", r)
	}
	mustAppend(t, s, &service.Batch{SessionID: "s1", Delete: true})
	if sess, usr := usageOf(t, s, "s1", "u1"); sess != 0 || usr != 20 {
		t.Errorf("after the deletion: the session's usage %d, the user's %d; want 0, 20", sess, usr)
	}
	create(t, s, newSession("s2", "u1", t0))
	if r := reserve(t, s, reservation("h2", "s2", 0, 100, 70)); r != nil {
		t.Errorf("the deleted session's hold of 70 still holds: refused %+v", r)
	}
}

func testRunBudget(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	r := newRun("r1", "s1", service.RunWaitingForInput, t0)
	r.Budget = service.BudgetUser
	l.append(runChanged(r))
	got, err := s.Run(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Budget != service.BudgetUser {
		t.Errorf("the run's budget: %q, want %q", got.Budget, service.BudgetUser)
	}
	waiting, err := s.RunsByStatus(t.Context(), service.RunWaitingForInput)
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) != 1 || waiting[0].Budget != service.BudgetUser {
		t.Errorf("RunsByStatus: %s, want the run waiting for the user's budget", dump(waiting))
	}
}
