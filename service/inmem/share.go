package inmem

import (
	"cmp"
	"context"
	"slices"

	"github.com/talkgraph/talkgraph/service"
)

// Share links: a map by ID, found by hash through an index of their own.

func cloneShareLink(l *service.ShareLink) *service.ShareLink {
	if l == nil {
		return nil
	}
	c := *l
	c.Hash = slices.Clone(l.Hash)
	c.ExpiresAt = cloneTimePtr(l.ExpiresAt)
	c.RevokedAt = cloneTimePtr(l.RevokedAt)
	c.CreatedAt = cloneTime(l.CreatedAt)
	if l.Snapshot != nil {
		snap := *l.Snapshot
		snap.Text = clonePtr(l.Snapshot.Text)
		snap.Tools = slices.Clone(l.Snapshot.Tools)
		c.Snapshot = &snap
	}
	return &c
}

// putShareLink writes l whole but for its views; s.mu must be held.
func (s *Store) putShareLink(sd *sessionData, l *service.ShareLink) {
	c := cloneShareLink(l)
	if old := s.shares[l.ID]; old != nil {
		c.Views = old.Views
		delete(s.shareByHash, string(old.Hash))
	} else {
		c.Views = 0
	}
	s.shares[l.ID] = c
	s.shareByHash[string(c.Hash)] = l.ID
	sd.shares[l.ID] = struct{}{}
}

// ShareLink implements service.Store.
func (s *Store) ShareLink(ctx context.Context, hash []byte) (*service.ShareLink, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if id, ok := s.shareByHash[string(hash)]; ok {
		return cloneShareLink(s.shares[id]), nil
	}
	return nil, service.Errorf(service.ENOTFOUND, "share link not found")
}

// ShareLinkByID implements service.Store.
func (s *Store) ShareLinkByID(ctx context.Context, id string) (*service.ShareLink, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if l := s.shares[id]; l != nil {
		return cloneShareLink(l), nil
	}
	return nil, service.Errorf(service.ENOTFOUND, "share link not found")
}

// ShareLinks implements service.Store.
func (s *Store) ShareLinks(ctx context.Context, sessionID string) ([]*service.ShareLink, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.ShareLink{}
	if sd := s.sessions[sessionID]; sd != nil {
		for id := range sd.shares {
			out = append(out, cloneShareLink(s.shares[id]))
		}
	}
	slices.SortFunc(out, func(a, b *service.ShareLink) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// CountShareView implements service.Store.
func (s *Store) CountShareView(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed()
	}
	if l := s.shares[id]; l != nil {
		l.Views++
	}
	return nil
}
