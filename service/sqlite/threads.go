package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/talkgraph/talkgraph/service"
)

// Thread implements service.Store.
func (s *Store) Thread(ctx context.Context, userID, threadID string) (string, error) {
	id, err := getOne(ctx, s, "thread", threadID, qThread, scanString, userID, threadID)
	if err != nil {
		return "", err
	}
	return *id, nil
}

func scanString(sc scanner) (*string, error) {
	var v string
	err := sc.Scan(&v)
	return &v, err
}

// BindThread implements service.Store: on the writer connection, between two of the
// writer's rounds, the binding and the read of what is bound in one transaction.
func (s *Store) BindThread(ctx context.Context, userID, threadID, sessionID string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return "", s.fail("thread", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, qBindThread, userID, threadID, sessionID); err != nil {
		return "", s.fail("thread", err)
	}
	var bound string
	if err := tx.QueryRowContext(ctx, qThread, userID, threadID).Scan(&bound); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", service.Errorf(service.EINTERNAL, "thread %s bound to nothing", threadID)
		}
		return "", s.fail("thread", err)
	}
	if err := tx.Commit(); err != nil {
		return "", s.fail("thread", err)
	}
	return bound, nil
}
