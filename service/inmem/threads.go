package inmem

import (
	"context"

	"github.com/talkgraph/talkgraph/service"
)

// Thread implements service.Store.
func (s *Store) Thread(ctx context.Context, userID, threadID string) (string, error) {
	if err := s.rlock(ctx); err != nil {
		return "", err
	}
	defer s.mu.RUnlock()
	id, ok := s.threads[threadKey{userID, threadID}]
	if !ok {
		return "", service.Errorf(service.ENOTFOUND, "thread %s not found", threadID)
	}
	return id, nil
}

// BindThread implements service.Store.
func (s *Store) BindThread(ctx context.Context, userID, threadID, sessionID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", errClosed()
	}
	k := threadKey{userID, threadID}
	if id, ok := s.threads[k]; ok {
		return id, nil
	}
	s.threads[k] = sessionID
	s.bindings[sessionID] = append(s.bindings[sessionID], k)
	return sessionID, nil
}
