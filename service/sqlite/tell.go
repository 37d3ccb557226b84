package sqlite

import (
	"database/sql"
	"encoding/json"
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

// insertViewer numbers events per user and inserts them.
func (w *txWriter) insertViewer(events []*service.ViewerEvent) error {
	if len(events) == 0 {
		return nil
	}
	count := map[string]int64{}
	var users []string
	for _, e := range events {
		if count[e.UserID] == 0 {
			users = append(users, e.UserID)
		}
		count[e.UserID]++
	}
	next := map[string]int64{} // the Seq of each user's next event
	for _, u := range users {
		var last int64
		if err := w.stmt(qBumpViewerSeq).QueryRowContext(w.ctx, u, count[u]).Scan(&last); err != nil {
			return err
		}
		next[u] = last - count[u] + 1
	}
	rows := make([][]any, 0, len(events))
	for _, e := range events {
		payload, err := e.Payload()
		if err != nil {
			return err
		}
		rows = append(rows, []any{e.UserID, next[e.UserID], dbTime(e.At), string(payload)})
		next[e.UserID]++
	}
	return w.multiRow(rows, qInsertViewerEvents, func(int, int) error { return nil })
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
