package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
)

// Share links.

const shareCols = `id, session_id, hash, live, include_tools, expires_at, revoked_at, created_at, views, snapshot`

const (
	qShareLink     = `SELECT ` + shareCols + ` FROM share_links WHERE hash = $1`
	qShareLinkByID = `SELECT ` + shareCols + ` FROM share_links WHERE id = $1`
	qShareLinks    = `SELECT ` + shareCols + ` FROM share_links WHERE session_id = $1 ORDER BY created_at, id`
	// A link is written whole but for its views, which only qCountShareView changes.
	qPutShareLink = `INSERT INTO share_links (` + shareCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9)
		ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, live = excluded.live,
		include_tools = excluded.include_tools, expires_at = excluded.expires_at,
		revoked_at = excluded.revoked_at, created_at = excluded.created_at, snapshot = excluded.snapshot
		WHERE share_links.session_id = excluded.session_id`
	qCountShareView = `UPDATE share_links SET views = views + 1 WHERE id = $1`
)

func shareLinkArgs(l *service.ShareLink) []any {
	var snap []byte
	if l.Snapshot != nil {
		snap, _ = json.Marshal(l.Snapshot) // a struct of strings and numbers: it marshals
	}
	return []any{l.ID, l.SessionID, l.Hash, l.Live, l.IncludeTools, dbNullTime(l.ExpiresAt), dbNullTime(l.RevokedAt), dbTime(l.CreatedAt), snap}
}

func scanShareLink(row scanner) (*service.ShareLink, error) {
	var l service.ShareLink
	var expires, revoked *int64
	var created int64
	var snap []byte
	if err := row.Scan(&l.ID, &l.SessionID, &l.Hash, &l.Live, &l.IncludeTools, &expires, &revoked, &created, &l.Views, &snap); err != nil {
		return nil, err
	}
	l.ExpiresAt, l.RevokedAt, l.CreatedAt = goNullTime(expires), goNullTime(revoked), goTime(created)
	if snap != nil {
		l.Snapshot = new(service.ShareSnapshot)
		if err := json.Unmarshal(snap, l.Snapshot); err != nil {
			return nil, err
		}
	}
	return &l, nil
}

// queueShareLinks queues the writes of the share links of the batches idxs.
func queueShareLinks(wb *pgx.Batch, preps []*prep, idxs []int) {
	for _, i := range idxs {
		if l := preps[i].b.ShareLink; l != nil && !preps[i].b.Delete {
			wb.Queue(qPutShareLink, shareLinkArgs(l)...)
		}
	}
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

// CountShareView implements service.Store.
func (s *Store) CountShareView(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	if !storable([]any{id}) {
		return nil
	}
	_, err := s.pool.Exec(ctx, qCountShareView, id)
	return fail("share link views", err)
}
