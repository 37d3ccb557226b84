package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// takeoverStore is a store shared by replicas, in memory, whose Coordinator knows no
// replica but the one asking: each claim takes over the active runs not claimed yet.
// Until the second claim, the session named failing cannot be read (or, with failWrites,
// written): the store is out of reach, so that the first claim's recovery of its run
// fails. wrote is closed once a write of that session is stored.
type takeoverStore struct {
	service.Store // hides the SoleWriter of the store inside, as a shared store has none

	failing    string
	failWrites bool
	wrote      chan struct{}

	mu     sync.Mutex
	owner  map[string]string // run ID → the replica that claimed it
	claims int
	failed int
	stored bool
}

var _ service.Coordinator = (*takeoverStore)(nil)

func newTakeoverStore(inner service.Store, failing string, failWrites bool) *takeoverStore {
	return &takeoverStore{Store: inner, failing: failing, failWrites: failWrites, wrote: make(chan struct{}), owner: map[string]string{}}
}

func (s *takeoverStore) Heartbeat(_ context.Context, id string, _, _ time.Time) ([]string, error) {
	return []string{id}, nil
}

func (s *takeoverStore) Leave(context.Context, string) error { return nil }

func (s *takeoverStore) ClaimRuns(ctx context.Context, id string, _ time.Time) ([]*service.Run, error) {
	runs, err := s.Store.RunsByStatus(ctx, service.RunRunning, service.RunQueued, service.RunWaitingForInput)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	var claimed []*service.Run
	for _, run := range runs {
		if _, taken := s.owner[run.ID]; !taken {
			s.owner[run.ID], run.Owner = id, id
			claimed = append(claimed, run)
		}
	}
	return claimed, nil
}

func (s *takeoverStore) ActiveRun(ctx context.Context, sessionID string) (*service.Run, error) {
	runs, err := s.Store.RunsByStatus(ctx, service.RunRunning, service.RunQueued, service.RunWaitingForInput)
	if err != nil {
		return nil, err
	}
	for _, run := range runs {
		if run.SessionID == sessionID {
			return s.owned(run), nil
		}
	}
	return nil, service.Errorf(service.ENOTFOUND, "no active run")
}

func (s *takeoverStore) Run(ctx context.Context, id string) (*service.Run, error) {
	run, err := s.Store.Run(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.owned(run), nil
}

func (s *takeoverStore) owned(run *service.Run) *service.Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	run.Owner = s.owner[run.ID]
	return run
}

// fails reports whether an access (a write when write) to session id fails now, and
// counts it.
func (s *takeoverStore) fails(id string, write bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := id == s.failing && write == s.failWrites && s.claims < 2
	if fail {
		s.failed++
	}
	return fail
}

// failures returns how many accesses to the failing session failed.
func (s *takeoverStore) failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *takeoverStore) Session(ctx context.Context, id string) (*service.TalkSession, error) {
	if s.fails(id, false) {
		return nil, service.Errorf(service.EUNAVAILABLE, "storage is unreachable")
	}
	return s.Store.Session(ctx, id)
}

func (s *takeoverStore) Append(ctx context.Context, batches []*service.Batch) []error {
	errs := make([]error, len(batches))
	var rest []*service.Batch
	var at []int
	for i, b := range batches {
		if s.fails(b.SessionID, true) {
			errs[i] = service.Errorf(service.EUNAVAILABLE, "storage is unreachable")
			continue
		}
		rest, at = append(rest, b), append(at, i)
	}
	for j, err := range s.Store.Append(ctx, rest) {
		errs[at[j]] = err
		if err == nil && rest[j].SessionID == s.failing {
			s.mu.Lock()
			if !s.stored {
				s.stored = true
				close(s.wrote)
			}
			s.mu.Unlock()
		}
	}
	return errs
}

// startSurvivor starts the replica that takes the runs of store over, a claim every
// 100 ms, and waits until it wrote the failing session, its recovery having failed first.
func startSurvivor(t *testing.T, store *takeoverStore) *service.Service {
	t.Helper()
	svc, _ := startService(t, setup{store: store, config: func(c *service.Config) {
		c.ReplicaID = "survivor"
		c.RunLease = 300 * time.Millisecond
	}})
	select {
	case <-store.wrote:
	case <-time.After(patience):
		t.Fatalf("the run taken over was not brought back within %v (its recovery failed %d times)", patience, store.failures())
	}
	if store.failures() == 0 {
		t.Fatal("the first recovery did not fail: the test tests nothing")
	}
	return svc
}

// A replica that claimed a run of a replica that is gone, and failed to bring it back
// because the store failed just then, owns the run: no other replica claims it. Its next
// claim tries the run again, and the run ends INTERRUPTED with its text, rather than stay
// RUNNING for ever.
func TestTakeOverThatFailedIsTriedAgain(t *testing.T) {
	inner := inmem.New()
	l := newCrashLog(t, inner, "demo")
	_, run, reply := l.streamingRun("tell me", "Hello ", "there")

	svc := startSurvivor(t, newTakeoverStore(inner, l.sess.ID, false))
	h := history(t, svc, alice, l.sess.ID)
	if last := h[len(h)-1]; last.ID != reply.ID || last.Content != "Hello there" || last.Status != service.MessageInterrupted {
		t.Errorf("the reply after the takeover: %+v", last)
	}
	if got := getRun(t, svc, alice, run.ID); got.Owner != "survivor" || got.Status != service.RunInterrupted {
		t.Errorf("the run: %s, owned by %q", got.Status, got.Owner)
	}
}

// The same for a run waiting for an answer whose recovery's write failed: what the first
// try had set up in memory goes with the failed write, the next claim brings the run back,
// and an answer resumes it.
func TestTakeOverOfAWaitingRunThatFailedIsTriedAgain(t *testing.T) {
	inner := inmem.New()
	l := newCrashLog(t, inner, "demo")
	_, run, _ := l.streamingRun("/ask Favourite colour?", "Let me ask. ")
	q := l.question(run, nil, "", "Favourite colour?") // the reply left streaming: recovery completes it

	svc := startSurvivor(t, newTakeoverStore(inner, l.sess.ID, true))
	f := follow(t, svc, alice, l.sess.ID, "")
	if _, _, err := svc.Respond(alice, q.ID, "blue"); err != nil {
		t.Fatalf("the answer after the takeover: %v", err)
	}
	if got := lastEnd(t, f.until(runEnds(run.ID))).Status; got != service.RunCompleted {
		t.Errorf("the run ended %s, want COMPLETED", got)
	}
}
