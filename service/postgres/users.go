package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
)

// ViewerEvents implements service.UserStore.
func (s *Store) ViewerEvents(ctx context.Context, userID string, afterSeq int64, limit int) ([]*service.ViewerEvent, error) {
	type row struct {
		seq     int64
		payload string
	}
	rows, err := getAll(ctx, s, "viewer events", func(sc scanner) (*row, error) {
		var r row
		return &r, sc.Scan(&r.seq, &r.payload)
	}, qViewerEvents, userID, afterSeq, sqlLimit(limit))
	if err != nil {
		return nil, err
	}
	out := make([]*service.ViewerEvent, 0, len(rows))
	for _, r := range rows {
		e, err := service.DecodeViewerEvent(userID, r.seq, []byte(r.payload))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// ViewerSeq implements service.UserStore.
func (s *Store) ViewerSeq(ctx context.Context, userID string) (int64, error) {
	n, err := getOne(ctx, s, "viewer seq", userID, qViewerSeq, func(sc scanner) (*int64, error) {
		var n int64
		return &n, sc.Scan(&n)
	}, userID)
	if service.ErrorCode(err) == service.ENOTFOUND { // a user ID no row can have
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return *n, nil
}

// PruneViewerEvents implements service.UserStore.
func (s *Store) PruneViewerEvents(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, qPruneViewer, dbBound(before))
	return tag.RowsAffected(), fail("pruning viewer events", err)
}

// CreateWebhook implements service.UserStore.
func (s *Store) CreateWebhook(ctx context.Context, w *service.Webhook, limit int) error {
	if !storable([]any{w.ID, w.UserID}) {
		return service.Errorf(service.EINVALID, "a webhook's IDs cannot be stored")
	}
	return s.inTx(ctx, "creating a webhook", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, qLockUserWebhooks, w.UserID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, qCountWebhooks, w.UserID).Scan(&n); err != nil {
			return err
		}
		if n >= limit {
			return service.Errorf(service.EINVALID, "you have %d webhooks, at most %d", n, limit)
		}
		_, err := tx.Exec(ctx, qInsertWebhook, webhookArgs(w)...)
		return err
	})
}

// Webhooks implements service.UserStore.
func (s *Store) Webhooks(ctx context.Context, userID string) ([]*service.Webhook, error) {
	return getAll(ctx, s, "webhooks", scanWebhook, qWebhooks, userID)
}

// Webhook implements service.UserStore.
func (s *Store) Webhook(ctx context.Context, id string) (*service.Webhook, error) {
	return getOne(ctx, s, "webhook", id, qWebhook, scanWebhook, id)
}

// UpdateWebhook implements service.UserStore.
func (s *Store) UpdateWebhook(ctx context.Context, id string, c service.WebhookChange) (w *service.Webhook, err error) {
	if !storable([]any{id}) {
		return nil, service.Errorf(service.ENOTFOUND, "webhook not found")
	}
	err = s.inTx(ctx, "updating a webhook", func(tx pgx.Tx) error {
		var err error
		w, err = scanWebhook(tx.QueryRow(ctx, qWebhookLock, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return service.Errorf(service.ENOTFOUND, "webhook not found")
		} else if err != nil {
			return err
		}
		c.Apply(w)
		_, err = tx.Exec(ctx, qUpdateWebhook, id, dbText(w.URL), w.Events, w.Enabled, dbText(w.DisabledReason),
			dbText(w.Description), w.Secret, w.PreviousSecret, dbNullTime(w.PreviousUntil), w.Failures)
		return err
	})
	return w, err
}

// DeleteWebhook implements service.UserStore.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	if !storable([]any{id}) {
		return service.Errorf(service.ENOTFOUND, "webhook not found")
	}
	tag, err := s.pool.Exec(ctx, qDeleteWebhook, id)
	if err != nil {
		return fail("deleting a webhook", err)
	}
	if tag.RowsAffected() == 0 {
		return service.Errorf(service.ENOTFOUND, "webhook not found")
	}
	return nil
}

// Deliveries implements service.UserStore.
func (s *Store) Deliveries(ctx context.Context, webhookID string, after *service.DeliveryPosition, limit int) ([]*service.Delivery, error) {
	if after == nil {
		return getAll(ctx, s, "deliveries", scanDelivery, qDeliveries, webhookID, sqlLimit(limit))
	}
	return getAll(ctx, s, "deliveries", scanDelivery, qDeliveriesAft, webhookID, dbBound(after.CreatedAt), after.ID, sqlLimit(limit))
}

// Delivery implements service.UserStore.
func (s *Store) Delivery(ctx context.Context, id string) (*service.Delivery, error) {
	return getOne(ctx, s, "delivery", id, qDelivery, scanDelivery, id)
}

// ClaimDeliveries implements service.UserStore with one UPDATE of the due deliveries,
// which it locks with FOR UPDATE SKIP LOCKED, then reads their webhooks.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]*service.Delivery, error) {
	ds, err := getAll(ctx, s, "claiming deliveries", scanDelivery, qClaimDeliveries, owner, dbBound(until), dbBound(now), sqlLimit(limit))
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.WebhookID
	}
	ws, err := getAll(ctx, s, "claiming deliveries", scanWebhook, qWebhooksIn, ids)
	if err != nil {
		return nil, err
	}
	byID := map[string]*service.Webhook{}
	for _, w := range ws {
		byID[w.ID] = w
	}
	out := ds[:0]
	for _, d := range ds {
		if d.Webhook = byID[d.WebhookID]; d.Webhook != nil { // deleted meanwhile: it goes with it
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *service.Delivery) int {
		return cmp.Or(a.NextAttemptAt.Compare(*b.NextAttemptAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// FinishAttempt implements service.UserStore.
func (s *Store) FinishAttempt(ctx context.Context, owner string, a *service.Attempt) error {
	if !storable([]any{a.DeliveryID}) {
		return service.Errorf(service.ECONFLICT, "the delivery is not leased to %s", owner)
	}
	return s.inTx(ctx, "recording an attempt", func(tx pgx.Tx) error {
		var leaseOwner, webhookID string
		var once bool
		err := tx.QueryRow(ctx, qLeaseOf, a.DeliveryID).Scan(&leaseOwner, &webhookID, &once)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && leaseOwner != owner) {
			return service.Errorf(service.ECONFLICT, "the delivery is not leased to %s", owner)
		} else if err != nil {
			return err
		}
		status, next, delivered := service.DeliveryFailed, (*int64)(nil), (*int64)(nil)
		switch {
		case a.Delivered:
			at := dbTime(a.At)
			status, delivered = service.DeliveryDelivered, &at
		case a.Next != nil && !once:
			at := dbTime(*a.Next)
			status, next = service.DeliveryPending, &at
		}
		if _, err := tx.Exec(ctx, qFinishAttempt, a.DeliveryID, a.StatusCode, dbText(a.Error), string(status), next, delivered); err != nil {
			return err
		}
		switch status {
		case service.DeliveryDelivered:
			_, err = tx.Exec(ctx, qWebhookDelivered, webhookID)
		case service.DeliveryFailed:
			_, err = tx.Exec(ctx, qWebhookFailed, webhookID, a.DisableAfter, dbText(a.DisableReason))
		}
		if err == nil && a.Disable != "" {
			_, err = tx.Exec(ctx, qDisableWebhook, webhookID, dbText(a.Disable))
		}
		return err
	})
}

// Redeliver implements service.UserStore.
func (s *Store) Redeliver(ctx context.Context, id string, at time.Time) (*service.Delivery, error) {
	return getOne(ctx, s, "delivery", id, qRedeliver, scanDelivery, id, dbBound(at))
}

// PruneDeliveries implements service.UserStore.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, qPruneDeliveries, dbBound(before))
	return tag.RowsAffected(), fail("pruning deliveries", err)
}
