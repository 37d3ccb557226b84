package service

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// This file is a run held by a token budget: the check before each model call
// (Output.BeforeModelCall), the reservation it makes, and the wait when a cap is reached.
// The wait is an input of the run like a question (inputs.go): opened with the run's
// move to WAITING_FOR_INPUT, which names the cap (Run.Budget), in the log; closed when
// the session's cap is raised or removed (updateTalkSessionSettings, in the same write) or
// when the user's period turns (a timer, armed by whoever runs the run); withdrawn by stop
// like any other. It never fails the run.

// budgetKey is the key of a run's budget wait among its inputs: it has one at most.
const budgetKey = "budget"

// budgetWait is a run waiting for a token budget: scope's cap is reached.
type budgetWait struct {
	scope BudgetScope
	since time.Time
	// resets is when the user's period turns (the user's cap), zero for the session's.
	resets time.Time
}

func (b *budgetWait) asked() time.Time { return b.since }

// withdraw writes nothing of its own: the run's end (or status) says it stopped waiting.
func (b *budgetWait) withdraw(*txn, string) inputEnd { return inputEnd{withdrawn: ReasonStopped} }

// listIn lists nothing: a view shows the wait as the run's Budget.
func (b *budgetWait) listIn(*waitingLists) {}

// BeforeModelCall implements Output: see there.
func (o *output) BeforeModelCall(ctx context.Context, estimate int) error {
	if estimate < 0 {
		return Errorf(EINVALID, "a call's estimate cannot be negative")
	}
	s, ar := o.s, o.ar
	pause := 100 * time.Millisecond
	for {
		r, err := o.reservation(int64(estimate))
		if err != nil || r == nil {
			return err
		}
		refusal, err := s.store.Reserve(ar.ctx, r)
		if err != nil {
			return err
		}
		if refusal == nil {
			o.held(r)
			return nil
		}
		if !refusal.Reached {
			// Calls under way hold what is left: once they report, there may be room.
			if err := pauseOrStop(ar.ctx, s.closing, pause); err != nil {
				return o.ended()
			}
			pause = min(2*pause, time.Second)
			continue
		}
		w, err := o.openBudgetWait(refusal.Scope, r)
		if err != nil {
			return err
		}
		if w == nil {
			continue // the cap changed meanwhile
		}
		if _, err := o.wait(ctx, w); err != nil {
			return err
		}
	}
}

// reservation returns the reservation the next model call of o's run makes, after the
// run's spending so far is written; nil when no cap applies.
func (o *output) reservation(estimate int64) (*Reservation, error) {
	s, ar := o.s, o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return nil, o.ended()
	}
	if st.sess == nil { // the caps as they are now: read the session's row again
		sess, err := s.store.Session(ar.ctx, st.id)
		if err != nil {
			return nil, err
		}
		st.setRowLocked(sess)
	}
	sessionCap, userCap := ar.capsLocked()
	if sessionCap == 0 && userCap == 0 {
		return nil, nil // what the run spent rides its next write
	}
	if ar.spend != nil || ar.hold != nil {
		// What the run spent counts before the next call is weighed.
		ar.releaseHoldLocked()
		t := st.beginLocked()
		if err := t.commitLocked(ar.ctx); err != nil {
			return nil, err
		}
	}
	now := s.now()
	period, _ := s.cfg.budgetPeriod(now)
	return &Reservation{ID: newID(), SessionID: st.id, UserID: ar.run.UserID, Period: period,
		SessionCap: sessionCap, UserCap: userCap, Tokens: max(estimate, ar.largestCall, 1),
		Now: now, Until: now.Add(s.cfg.BudgetHold)}, nil
}

// capsLocked returns the caps that apply to ar's next call, 0 for none.
func (ar *activeRun) capsLocked() (session, user int64) {
	set := ar.settings
	if sess := ar.st.sess; sess != nil {
		set = sess.Settings // the session's settings as they are now: a cap raised meanwhile holds
	}
	if set.TokenBudget != nil {
		session = int64(*set.TokenBudget)
	}
	return session, ar.st.c.cfg.UserTokenBudget
}

// held notes the reservation the run holds for its model call under way.
func (o *output) held(r *Reservation) {
	ar := o.ar
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	ar.hold = r
}

// releaseHoldLocked puts the reservation ar holds, if any, in what its next write
// settles.
func (ar *activeRun) releaseHoldLocked() {
	if r := ar.hold; r != nil {
		ar.spend = addSpend(ar.spend, ar.run.UserID, r.Period, Usage{}, r.ID)
		ar.hold = nil
	}
}

// openBudgetWait has ar wait for scope's cap, which refused r; nil when the caps are not
// what r weighed any more (raised, removed, a new period): try again.
func (o *output) openBudgetWait(scope BudgetScope, r *Reservation) (*waiting, error) {
	s, ar := o.s, o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return nil, o.ended()
	}
	now := s.now()
	period, resets := s.cfg.budgetPeriod(now)
	sessionCap, userCap := ar.capsLocked()
	if sessionCap != r.SessionCap || userCap != r.UserCap || period != r.Period {
		return nil, nil
	}
	b := &budgetWait{scope: scope, since: now}
	if scope == BudgetUser {
		b.resets = resets
	}
	t := st.beginLocked()
	ar.writeTextLocked(t)
	if ar.msg != nil {
		ar.completeMessageLocked(t, MessageComplete, "")
	}
	w := newWaiting(budgetKey, b, time.Time{})
	ar.openLocked(t, w)
	if err := t.commitLocked(ar.ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// armBudgetLocked arms w, a budget wait: the user's cap lifts when the period turns.
func (ar *activeRun) armBudgetLocked(w *waiting, b *budgetWait) {
	if b.scope != BudgetUser {
		return // the session's cap lifts when it is raised
	}
	w.timer = time.AfterFunc(b.resets.Sub(ar.st.c.now()), func() { ar.budgetLifted(BudgetUser) })
}

// budgetLifted closes ar's wait for scope's cap, which was raised or whose period turned:
// the agent weighs its call again. When the storage cannot take it now, it is tried
// again in a moment.
func (ar *activeRun) budgetLifted(scope BudgetScope) {
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.beginLocked()
	if !ar.liftBudgetLocked(t, scope, trace.SpanContext{}) {
		return
	}
	if err := t.commitLocked(context.Background()); err != nil {
		if w := ar.inputs[budgetKey]; w != nil {
			w.timer = time.AfterFunc(time.Second, func() { ar.budgetLifted(scope) })
		}
	}
}

// liftBudgetLocked adds to t the end of ar's wait for scope's cap, and reports whether it
// waited so.
func (ar *activeRun) liftBudgetLocked(t *txn, scope BudgetScope, cause trace.SpanContext) bool {
	if ar.sealed || ar.st.active != ar {
		return false
	}
	_, b, ok := waitingOn[*budgetWait](ar, budgetKey)
	if !ok || b.scope != scope {
		return false
	}
	ar.closeLocked(t, map[string]inputEnd{budgetKey: {}}, cause)
	return true
}

// raisedLocked adds to t the end of the wait of st's run for the session's cap when set,
// the session's new settings, lift it: the cap was removed or is now above what the
// session's runs spent.
func (st *sessionState) raisedLocked(ctx context.Context, t *txn, set Settings) error {
	ar := st.active
	if _, b, ok := waitingOn[*budgetWait](ar, budgetKey); !ok || b.scope != BudgetSession {
		return nil
	}
	if set.TokenBudget != nil && *set.TokenBudget > 0 {
		used, err := st.c.store.SessionUsage(ctx, st.id)
		if err != nil {
			return err
		}
		if used.Tokens() >= int64(*set.TokenBudget) {
			return nil
		}
	}
	ar.liftBudgetLocked(t, BudgetSession, trace.SpanContextFromContext(ctx))
	return nil
}

// budgetLiftedLocked ends the wait of st's run for a budget that no longer holds it: the
// session's cap raised, or the user's period turned, while no process ran it.
func (st *sessionState) budgetLiftedLocked(ctx context.Context) error {
	s := st.c
	_, b, ok := waitingOn[*budgetWait](st.active, budgetKey)
	if !ok {
		return nil
	}
	t := st.beginLocked()
	switch b.scope {
	case BudgetSession:
		if st.sess == nil {
			return nil
		}
		if err := st.raisedLocked(ctx, t, st.sess.Settings); err != nil {
			return err
		}
	case BudgetUser:
		if limit := s.cfg.UserTokenBudget; limit > 0 {
			period, _ := s.cfg.budgetPeriod(s.now())
			used, err := s.store.UserUsage(ctx, st.userID, period)
			if err != nil || used.Tokens() >= limit {
				return err
			}
		}
		st.active.liftBudgetLocked(t, BudgetUser, trace.SpanContextFromContext(ctx))
	}
	return t.commitLocked(ctx)
}
