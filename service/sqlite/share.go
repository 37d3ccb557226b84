package sqlite

import (
	"context"
	"encoding/json"

	"github.com/talkgraph/talkgraph/service"
)

// Share links.

const shareCols = `id, session_id, hash, live, include_tools, expires_at, revoked_at, created_at, views, snapshot`

const (
	qShareLink     = `SELECT ` + shareCols + ` FROM share_links WHERE hash = ?`
	qShareLinkByID = `SELECT ` + shareCols + ` FROM share_links WHERE id = ?`
	qShareLinks    = `SELECT ` + shareCols + ` FROM share_links WHERE session_id = ? ORDER BY created_at, id`
	// A link is written whole but for its views, which only qCountShareView changes.
	qPutShareLink = `INSERT INTO share_links (` + shareCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
		ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, live = excluded.live,
		include_tools = excluded.include_tools, expires_at = excluded.expires_at,
		revoked_at = excluded.revoked_at, created_at = excluded.created_at, snapshot = excluded.snapshot
		WHERE share_links.session_id = excluded.session_id`
	qCountShareView   = `UPDATE share_links SET views = views + 1 WHERE id = ?`
	qDeleteShareLinks = `DELETE FROM share_links WHERE session_id = ?`
)

func shareLinkArgs(l *service.ShareLink) ([]any, error) {
	var snap any
	if l.Snapshot != nil {
		b, err := json.Marshal(l.Snapshot)
		if err != nil {
			return nil, err
		}
		snap = string(b)
	}
	return []any{l.ID, l.SessionID, l.Hash, l.Live, l.IncludeTools, dbNullTime(l.ExpiresAt), dbNullTime(l.RevokedAt), dbTime(l.CreatedAt), snap}, nil
}

func scanShareLink(sc scanner) (*service.ShareLink, error) {
	var l service.ShareLink
	err := sc.Scan(&l.ID, &l.SessionID, &l.Hash, &l.Live, &l.IncludeTools, nullTimeCol{&l.ExpiresAt},
		nullTimeCol{&l.RevokedAt}, timeCol{&l.CreatedAt}, &l.Views, jsonCol{&l.Snapshot})
	return &l, err
}

// putShareLink writes a batch's share link; a link of another session changes nothing,
// which fails the batch.
func (w *txWriter) putShareLink(l *service.ShareLink) error {
	args, err := shareLinkArgs(l)
	if err != nil {
		return err
	}
	n, err := w.exec(qPutShareLink, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return &rowError{"share link", l.ID, l.SessionID}
	}
	return nil
}

// ShareLink implements service.Store.
func (s *Store) ShareLink(ctx context.Context, hash []byte) (*service.ShareLink, error) {
	return getOne(ctx, s, "share link", "", qShareLink, scanShareLink, hash)
}

// ShareLinkByID implements service.Store.
func (s *Store) ShareLinkByID(ctx context.Context, id string) (*service.ShareLink, error) {
	return getOne(ctx, s, "share link", id, qShareLinkByID, scanShareLink, id)
}

// ShareLinks implements service.Store.
func (s *Store) ShareLinks(ctx context.Context, sessionID string) ([]*service.ShareLink, error) {
	return getAll(ctx, s, "share links", scanShareLink, qShareLinks, sessionID)
}

// CountShareView implements service.Store: one short transaction on the writer.
func (s *Store) CountShareView(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.w.ExecContext(context.WithoutCancel(ctx), qCountShareView, id); err != nil {
		return s.fail("share link views", err)
	}
	return nil
}
