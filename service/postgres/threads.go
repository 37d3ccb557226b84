package postgres

import (
	"context"

	"github.com/talkgraph/talkgraph/service"
)

// AG-UI threads (Store.Thread, Store.BindThread). A binding names its session without a
// foreign key: it may come before the session's creation; a deletion removes it
// (qDeleteThreads, in the deletion's transaction).
const (
	qThread     = `SELECT session_id FROM agui_threads WHERE user_id = $1 AND thread_id = $2`
	qBindThread = `INSERT INTO agui_threads (user_id, thread_id, session_id) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING RETURNING session_id`
	qDeleteThreads = `DELETE FROM agui_threads WHERE session_id = ANY($1::text[])`
)

func scanString(sc scanner) (*string, error) {
	var v string
	err := sc.Scan(&v)
	return &v, err
}

// Thread implements service.Store.
func (s *Store) Thread(ctx context.Context, userID, threadID string) (string, error) {
	id, err := getOne(ctx, s, "thread", threadID, qThread, scanString, userID, threadID)
	if err != nil {
		return "", err
	}
	return *id, nil
}

// BindThread implements service.Store: the insert, or, when a binding was there (or a
// concurrent insert won), the binding read in a statement of its own, which sees what
// the other committed.
func (s *Store) BindThread(ctx context.Context, userID, threadID, sessionID string) (string, error) {
	if !storable([]any{userID, threadID, sessionID}) {
		return "", service.Errorf(service.EINVALID, "the thread ID is not valid UTF-8 text")
	}
	id, err := getOne(ctx, s, "thread", threadID, qBindThread, scanString, userID, threadID, sessionID)
	if service.ErrorCode(err) == service.ENOTFOUND {
		return s.Thread(ctx, userID, threadID)
	}
	if err != nil {
		return "", err
	}
	return *id, nil
}
