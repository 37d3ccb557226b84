package inmem

import (
	"context"

	"github.com/talkgraph/talkgraph/service"
)

type userPeriod struct{ user, period string }

// spend counts sp for session id; s.mu must be held.
func (s *Store) spend(id string, sp *service.Spend) {
	s.usage[id] = plus(s.usage[id], sp.Usage)
	k := userPeriod{sp.UserID, sp.Period}
	s.userUsage[k] = plus(s.userUsage[k], sp.Usage)
	for _, h := range sp.Holds {
		delete(s.holds, h)
	}
}

func plus(a, b service.Usage) service.Usage {
	return service.Usage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens}
}

// Reserve implements service.UsageStore.
func (s *Store) Reserve(ctx context.Context, r *service.Reservation) (*service.BudgetRefusal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed()
	}
	var sessionHeld, userHeld int64
	for id, h := range s.holds {
		if !h.Until.After(r.Now) {
			delete(s.holds, id) // lapsed: its process died before it settled
			continue
		}
		if h.SessionID == r.SessionID {
			sessionHeld += h.Tokens
		}
		if h.UserID == r.UserID && h.Period == r.Period {
			userHeld += h.Tokens
		}
	}
	if refusal := service.Weigh(service.BudgetSession, r.SessionCap, s.usage[r.SessionID].Tokens(), sessionHeld); refusal != nil {
		return refusal, nil
	}
	if refusal := service.Weigh(service.BudgetUser, r.UserCap, s.userUsage[userPeriod{r.UserID, r.Period}].Tokens(), userHeld); refusal != nil {
		return refusal, nil
	}
	cp := *r
	s.holds[r.ID] = &cp
	return nil, nil
}

// SessionUsage implements service.UsageStore.
func (s *Store) SessionUsage(ctx context.Context, sessionID string) (service.Usage, error) {
	if err := s.rlock(ctx); err != nil {
		return service.Usage{}, err
	}
	defer s.mu.RUnlock()
	return s.usage[sessionID], nil
}

// UserUsage implements service.UsageStore.
func (s *Store) UserUsage(ctx context.Context, userID, period string) (service.Usage, error) {
	if err := s.rlock(ctx); err != nil {
		return service.Usage{}, err
	}
	defer s.mu.RUnlock()
	return s.userUsage[userPeriod{userID, period}], nil
}
