package service

import (
	"context"
	"time"
)

// This file is what a model may spend: a session's own cap (Settings.TokenBudget, which
// its user sets) and a user's cap per period (Config.UserTokenBudget, which the operator
// sets), both in tokens, input and output together. What runs spend is counted in the
// store, per session and per user and period: a model call's usage is a Spend that rides
// the session's next write (Batch.Spend). Before each call of a model an agent asks
// (Output.BeforeModelCall); while a cap applies, the call reserves what it may cost in the
// store (UsageStore.Reserve), which grants it only while the usage reported so far and
// the reservations of calls under way leave room under every cap, so that replicas
// cannot both spend the last tokens. A call refused because the usage reached a cap
// waits as an input of its run (budgetwait.go), until the cap is raised or the period
// turns.

// BudgetScope names a cap: the session's own, or its user's for the period.
type BudgetScope string

const (
	BudgetSession BudgetScope = "SESSION"
	BudgetUser    BudgetScope = "USER"
)

// UsageStore is the part of a Store that counts what models spend and arbitrates the
// caps. Usage is counted per session and per user and period (a key such as "2026-05"
// or "2026-05-04", see Config.UserBudgetPeriod) from the Spends of written batches.
type UsageStore interface {
	// Reserve holds r.Tokens for one model call when the caps r names leave room: for
	// each cap above 0 (the session's, the user's for r.Period), the usage counted so far
	// must be below it, and that usage plus the tokens held by other reservations not
	// lapsed at r.Now below it too. When they do, it stores the reservation, which holds
	// its tokens until a Spend settles it (Spend.Holds) or r.Until passes, and returns
	// nil. Otherwise it stores nothing and says which cap refused it, the session's
	// first. Two processes reserving at once never both get tokens that only one
	// reservation's worth of room allows: the store decides, not a read before a write.
	Reserve(ctx context.Context, r *Reservation) (*BudgetRefusal, error)
	// SessionUsage returns what a session's runs reported, summed; zero for a session
	// with none or that does not exist.
	SessionUsage(ctx context.Context, sessionID string) (Usage, error)
	// UserUsage returns what user userID's runs reported in period, summed.
	UserUsage(ctx context.Context, userID, period string) (Usage, error)
}

// Reservation is one model call's claim on the caps (UsageStore.Reserve).
type Reservation struct {
	// ID names the reservation; a Spend settles it by this ID.
	ID        string
	SessionID string
	UserID    string
	// Period is the user's period the call counts in.
	Period string
	// SessionCap and UserCap are the caps in tokens; 0 for none.
	SessionCap int64
	UserCap    int64
	// Tokens is what the call holds: what it may cost.
	Tokens int64
	// Now is when it is made; Until when it lapses, if nothing settles it first.
	Now, Until time.Time
}

// BudgetRefusal is why a reservation was refused: Scope's cap is Cap, and Used is what
// counts against it. Reached says that the usage reported so far is at the cap: no call
// may be made until the cap is raised or the period turns. Otherwise reservations of
// calls under way fill what is left, and a moment later there may be room.
type BudgetRefusal struct {
	Scope   BudgetScope
	Reached bool
	Used    int64
	Cap     int64
}

// Spend is what a session's runs spent since its last write: it adds Usage to the
// session's count and to UserID's for Period, and settles the reservations Holds names
// (they hold nothing more), in the transaction that writes its batch.
type Spend struct {
	UserID string
	Period string
	Usage  Usage
	Holds  []string
}

// Tokens is what u counts against a cap: input and output together.
func (u Usage) Tokens() int64 { return int64(u.InputTokens) + int64(u.OutputTokens) }

// addSpend adds usage and holds to sp (nil: a new one) for user u in period.
func addSpend(sp *Spend, u, period string, usage Usage, holds ...string) *Spend {
	if sp == nil {
		sp = &Spend{UserID: u, Period: period}
	}
	sp.Usage.InputTokens += usage.InputTokens
	sp.Usage.OutputTokens += usage.OutputTokens
	sp.Holds = append(sp.Holds, holds...)
	return sp
}

// mergeSpend returns a and b together (either may be nil).
func mergeSpend(a, b *Spend) *Spend {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return addSpend(a, a.UserID, a.Period, b.Usage, b.Holds...)
}

// budgetPeriod returns the key of the user's budget period that holds at now, and when
// the next one begins: calendar days or months in UTC.
func (c *Config) budgetPeriod(now time.Time) (key string, next time.Time) {
	now = now.UTC()
	y, m, d := now.Date()
	if c.UserBudgetPeriod == "day" {
		return now.Format("2006-01-02"), time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	}
	return now.Format("2006-01"), time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}

// checkUserBudget returns EBUDGET while user u's runs have spent their cap for the period:
// a new message is refused then, and nothing is stored.
func (s *core) checkUserBudget(ctx context.Context, u string) error {
	limit := s.cfg.UserTokenBudget
	if limit <= 0 {
		return nil
	}
	period, next := s.cfg.budgetPeriod(s.now())
	used, err := s.store.UserUsage(ctx, u, period)
	if err != nil {
		return err
	}
	if used.Tokens() >= limit {
		return Errorf(EBUDGET, "you have used your %d tokens for this %s; the budget resets at %s",
			limit, s.cfg.UserBudgetPeriod, next.Format(time.RFC3339))
	}
	return nil
}

// UserBudget is what the caller has spent in the current period, and their cap.
type UserBudget struct {
	Usage Usage
	// Limit is the cap (nil for none) and ResetsAt when the period turns (nil without a
	// cap).
	Limit    *int64
	ResetsAt *time.Time
}

// ViewerBudget returns the caller's usage in the current period, their cap and when it
// resets.
func (s *Service) ViewerBudget(ctx context.Context) (*UserBudget, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	period, next := s.cfg.budgetPeriod(s.now())
	used, err := s.store.UserUsage(ctx, u, period)
	if err != nil {
		return nil, err
	}
	b := &UserBudget{Usage: used}
	if limit := s.cfg.UserTokenBudget; limit > 0 {
		b.Limit, b.ResetsAt = &limit, &next
	}
	return b, nil
}

// SessionUsage returns what the runs of v, a session the caller read, reported.
func (s *Service) SessionUsage(ctx context.Context, v *SessionView) (Usage, error) {
	return s.store.SessionUsage(ctx, v.ID)
}

// BudgetReached reports whether v, a session the caller read, is held by a budget: its
// run waits for one (the session's cap or its user's), or its usage is at or over its own
// cap.
func (s *Service) BudgetReached(ctx context.Context, v *SessionView) (bool, error) {
	if r := v.ActiveRun; r != nil && r.Budget != "" {
		return true, nil
	}
	limit := v.Settings.TokenBudget
	if limit == nil || *limit <= 0 {
		return false, nil
	}
	used, err := s.store.SessionUsage(ctx, v.ID)
	if err != nil {
		return false, err
	}
	return used.Tokens() >= int64(*limit), nil
}

// Weigh is how a store decides one cap of a reservation (UsageStore.Reserve): nil when
// limit is 0 or used and held leave room under it; otherwise the refusal, Reached when
// used alone is at the cap.
func Weigh(scope BudgetScope, limit, used, held int64) *BudgetRefusal {
	switch {
	case limit <= 0:
		return nil
	case used >= limit:
		return &BudgetRefusal{Scope: scope, Reached: true, Used: used, Cap: limit}
	case used+held >= limit:
		return &BudgetRefusal{Scope: scope, Used: used + held, Cap: limit}
	}
	return nil
}
