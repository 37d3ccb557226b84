package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
)

// inTx runs f in a transaction of its own, trying it once more when the connection broke
// before it committed anything.
func (s *Store) inTx(ctx context.Context, what string, f func(tx pgx.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	err := pgx.BeginFunc(ctx, s.pool, f)
	if brokenConn(err) && !errors.As(err, new(*service.Error)) {
		err = pgx.BeginFunc(ctx, s.pool, f)
	}
	return fail(what, err)
}

// queueSpends queues the spends of the batches idxs: per session and per user and period,
// rows sorted by key, then the reservations they settle.
func queueSpends(wb *pgx.Batch, preps []*prep, idxs []int) {
	type userKey struct{ user, period string }
	sessions := map[string]service.Usage{}
	users := map[userKey]service.Usage{}
	var holds []string
	for _, i := range idxs {
		b := preps[i].b
		sp := b.Spend
		if sp == nil || b.Delete {
			continue
		}
		sessions[b.SessionID] = plus(sessions[b.SessionID], sp.Usage)
		k := userKey{sp.UserID, sp.Period}
		users[k] = plus(users[k], sp.Usage)
		holds = append(holds, sp.Holds...)
	}
	if len(sessions) > 0 {
		ids := make([]string, 0, len(sessions))
		for id := range sessions {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		in, out := make([]int64, len(ids)), make([]int64, len(ids))
		for j, id := range ids {
			in[j], out[j] = int64(sessions[id].InputTokens), int64(sessions[id].OutputTokens)
		}
		wb.Queue(qSpendSessions, ids, in, out)
	}
	if len(users) > 0 {
		keys := make([]userKey, 0, len(users))
		for k := range users {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b userKey) int {
			if c := strings.Compare(a.user, b.user); c != 0 {
				return c
			}
			return strings.Compare(a.period, b.period)
		})
		ids, periods := make([]string, len(keys)), make([]string, len(keys))
		in, out := make([]int64, len(keys)), make([]int64, len(keys))
		for j, k := range keys {
			ids[j], periods[j] = k.user, k.period
			in[j], out[j] = int64(users[k].InputTokens), int64(users[k].OutputTokens)
		}
		wb.Queue(qSpendUsers, ids, periods, in, out)
	}
	if len(holds) > 0 {
		slices.Sort(holds)
		wb.Queue(qSettleHolds, holds)
	}
}

func plus(a, b service.Usage) service.Usage {
	return service.Usage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens}
}

// Reserve implements service.UsageStore: one user's reservations are made one at a time,
// under an advisory lock of theirs, and each weighs the usage and the holds in one
// snapshot.
func (s *Store) Reserve(ctx context.Context, r *service.Reservation) (*service.BudgetRefusal, error) {
	if !storable([]any{r.ID, r.SessionID, r.UserID, r.Period}) {
		return nil, service.Errorf(service.EINVALID, "a reservation's identifiers cannot be stored")
	}
	var refusal *service.BudgetRefusal
	err := s.inTx(ctx, "reserve", func(tx pgx.Tx) error {
		refusal = nil
		if _, err := tx.Exec(ctx, qLockBudget, r.UserID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qDropLapsedHolds, r.UserID, dbTime(r.Now)); err != nil {
			return err
		}
		var sessionUsed, sessionHeld, userUsed, userHeld int64
		if err := tx.QueryRow(ctx, qWeigh, r.SessionID, r.UserID, r.Period).Scan(&sessionUsed, &sessionHeld, &userUsed, &userHeld); err != nil {
			return err
		}
		if refusal = service.Weigh(service.BudgetSession, r.SessionCap, sessionUsed, sessionHeld); refusal != nil {
			return nil
		}
		if refusal = service.Weigh(service.BudgetUser, r.UserCap, userUsed, userHeld); refusal != nil {
			return nil
		}
		_, err := tx.Exec(ctx, qInsertHold, r.ID, r.SessionID, r.UserID, r.Period, r.Tokens, dbTime(r.Until))
		return err
	})
	return refusal, err
}

// SessionUsage implements service.UsageStore.
func (s *Store) SessionUsage(ctx context.Context, sessionID string) (service.Usage, error) {
	return s.usage(ctx, qSessionUsage, sessionID)
}

// UserUsage implements service.UsageStore.
func (s *Store) UserUsage(ctx context.Context, userID, period string) (service.Usage, error) {
	return s.usage(ctx, qUserUsage, userID, period)
}

func (s *Store) usage(ctx context.Context, query string, args ...any) (service.Usage, error) {
	u, err := getOne(ctx, s, "usage", "", query, func(row scanner) (*service.Usage, error) {
		var in, out int64
		err := row.Scan(&in, &out)
		return &service.Usage{InputTokens: int(in), OutputTokens: int(out)}, err
	}, args...)
	if service.ErrorCode(err) == service.ENOTFOUND {
		return service.Usage{}, nil
	}
	if err != nil {
		return service.Usage{}, err
	}
	return *u, nil
}
