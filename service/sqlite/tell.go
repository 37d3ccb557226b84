package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/service"
)

// tell writes what the accepted batches tell their users, in the round's transaction:
// each session's unread flag as the last batch of it leaves it, the viewer events
// (each user's numbered on from where their numbering is, in the batches' order), and a
// delivery of each webhook event to every enabled webhook of its user that takes its type.
func (w *txWriter) tell(accepted []int, batches []*service.Batch, chs []service.Changes) error {
	unread := map[string]bool{}
	var unreadOrder []string
	var viewer []*service.ViewerEvent
	var hooks []*service.HookEvent
	for _, i := range accepted {
		ch := &chs[i]
		if u := ch.Unread; u != nil && !batches[i].Delete {
			id := batches[i].SessionID
			if _, ok := unread[id]; !ok {
				unreadOrder = append(unreadOrder, id)
			}
			unread[id] = *u
		}
		viewer = append(viewer, ch.Viewer...)
		hooks = append(hooks, ch.Hooks...)
	}
	for _, id := range unreadOrder {
		if _, err := w.exec(qSetUnread, unread[id], id); err != nil {
			return err
		}
	}
	if err := w.insertViewer(viewer); err != nil {
		return err
	}
	return w.insertDeliveries(hooks)
}

// insertViewer numbers events per user, after each user's last event, and inserts them.
func (w *txWriter) insertViewer(events []*service.ViewerEvent) error {
	if len(events) == 0 {
		return nil
	}
	rows := make([][]any, 0, len(events))
	for _, e := range events {
		last, err := w.viewerLastOf(e.UserID)
		if err != nil {
			return err
		}
		payload, err := e.Payload()
		if err != nil {
			return err
		}
		w.viewerLast[e.UserID] = last + 1
		rows = append(rows, []any{e.UserID, last + 1, dbTime(e.At), string(payload)})
	}
	return w.multiRow(rows, qInsertViewerEvents, func(n, inserted int) error {
		if inserted != n {
			return fmt.Errorf("sqlite: %d of %d viewer events were already stored", n-inserted, n)
		}
		return nil
	})
}

// viewerLastOf returns the Seq of user u's last viewer event as the transaction sees it:
// pruning keeps every user's last event (see PruneViewerEvents), so that it numbers on.
func (w *txWriter) viewerLastOf(u string) (int64, error) {
	if last, ok := w.viewerLast[u]; ok {
		return last, nil
	}
	if last, ok := w.s.viewerLast[u]; ok {
		return last, nil
	}
	var last int64
	err := w.stmt(qViewerLast).QueryRowContext(w.ctx, u).Scan(&last)
	return last, err
}

// insertDeliveries makes the deliveries of hooks.
func (w *txWriter) insertDeliveries(hooks []*service.HookEvent) error {
	if len(hooks) == 0 {
		return nil
	}
	type target struct {
		id     string
		events []string
	}
	byUser := map[string][]target{}
	var rows [][]any
	for _, h := range hooks {
		targets, ok := byUser[h.UserID]
		if hooked, err := w.hooked(h.UserID); err != nil {
			return err
		} else if !hooked {
			continue
		}
		if !ok {
			list, err := w.webhooksOf(h.UserID)
			if err != nil {
				return err
			}
			for _, t := range list {
				targets = append(targets, target{t[0], nil})
				if err := json.Unmarshal([]byte(t[1]), &targets[len(targets)-1].events); err != nil {
					return err
				}
			}
			byUser[h.UserID] = targets
		}
		for _, t := range targets {
			if slices.Contains(t.events, h.Type) {
				at := dbTime(h.At)
				rows = append(rows, []any{uuid.NewString(), t.id, h.UserID, h.ID, h.Type, h.Body, string(service.DeliveryPending), at, at})
			}
		}
	}
	return w.multiRow(rows, qInsertDeliveries, func(int, int) error { return nil })
}

// hooked reports whether user u has webhooks, enabled or not: most users have none,
// and their events then cost no query. The store knows it once it read it, since every
// webhook is made and deleted through it (see CreateWebhook, DeleteWebhook).
func (w *txWriter) hooked(u string) (bool, error) {
	if h, ok := w.s.hooked[u]; ok {
		return h, nil
	}
	var n int
	if err := w.stmt(qCountWebhooks).QueryRowContext(w.ctx, u).Scan(&n); err != nil {
		return false, err
	}
	if len(w.s.hooked) > maxKnownSessions {
		clear(w.s.hooked)
	}
	w.s.hooked[u] = n > 0 // a rolled-back round leaves it true: read again when deleted
	return n > 0, nil
}

// webhooksOf returns the ID and events (JSON) of the user's enabled webhooks.
func (w *txWriter) webhooksOf(userID string) ([][2]string, error) {
	rows, err := w.stmt(qWebhooksToTell).QueryContext(w.ctx, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var id string
		var events sql.NullString
		if err := rows.Scan(&id, &events); err != nil {
			return nil, err
		}
		out = append(out, [2]string{id, events.String})
	}
	return out, rows.Err()
}
