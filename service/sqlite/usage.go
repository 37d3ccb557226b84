package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/talkgraph/talkgraph/service"
)

// writeTx runs f in a transaction of its own on the writer connection.
func (s *Store) writeTx(ctx context.Context, what string, f func(tx *sql.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return s.fail(what, err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return s.fail(what, err)
	}
	return s.fail(what, tx.Commit())
}

// spends counts the Spends of the accepted batches.
func (w *txWriter) spends(accepted []int, batches []*service.Batch) error {
	for _, i := range accepted {
		b := batches[i]
		sp := b.Spend
		if sp == nil {
			continue
		}
		in, out := sp.Usage.InputTokens, sp.Usage.OutputTokens
		if _, err := w.exec(qSpendSession, b.SessionID, in, out); err != nil {
			return err
		}
		if _, err := w.exec(qSpendUser, sp.UserID, sp.Period, in, out); err != nil {
			return err
		}
		for _, h := range sp.Holds {
			if _, err := w.exec(qSettleHold, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// Reserve implements service.UsageStore: the writer connection is the file's only
// writer, so what it reads in its transaction stays so until it commits.
func (s *Store) Reserve(ctx context.Context, r *service.Reservation) (*service.BudgetRefusal, error) {
	var refusal *service.BudgetRefusal
	err := s.writeTx(ctx, "reserve", func(tx *sql.Tx) error {
		if _, err := tx.Exec(qDropLapsedHolds, dbTime(r.Now)); err != nil {
			return err
		}
		used, err := usageIn(tx, qSessionUsage, r.SessionID)
		if err != nil {
			return err
		}
		var held int64
		if err := tx.QueryRow(qSessionHeld, r.SessionID).Scan(&held); err != nil {
			return err
		}
		if refusal = service.Weigh(service.BudgetSession, r.SessionCap, used.Tokens(), held); refusal != nil {
			return nil
		}
		if used, err = usageIn(tx, qUserUsage, r.UserID, r.Period); err != nil {
			return err
		}
		if err := tx.QueryRow(qUserHeld, r.UserID, r.Period).Scan(&held); err != nil {
			return err
		}
		if refusal = service.Weigh(service.BudgetUser, r.UserCap, used.Tokens(), held); refusal != nil {
			return nil
		}
		_, err = tx.Exec(qInsertHold, r.ID, r.SessionID, r.UserID, r.Period, r.Tokens, dbTime(r.Until))
		return err
	})
	return refusal, err
}

// usageIn reads a usage row in tx; zero when there is none.
func usageIn(tx *sql.Tx, query string, args ...any) (service.Usage, error) {
	var u service.Usage
	err := tx.QueryRow(query, args...).Scan(&u.InputTokens, &u.OutputTokens)
	if errors.Is(err, sql.ErrNoRows) {
		return service.Usage{}, nil
	}
	return u, err
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
	u, err := getOne(ctx, s, "usage", "", query, func(sc scanner) (*service.Usage, error) {
		var u service.Usage
		return &u, sc.Scan(&u.InputTokens, &u.OutputTokens)
	}, args...)
	if service.ErrorCode(err) == service.ENOTFOUND {
		return service.Usage{}, nil
	}
	if err != nil {
		return service.Usage{}, err
	}
	return *u, nil
}
