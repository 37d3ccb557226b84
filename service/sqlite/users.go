package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// ViewerEvents implements service.UserStore.
func (s *Store) ViewerEvents(ctx context.Context, userID string, afterSeq int64, limit int) ([]*service.ViewerEvent, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.stmt(qViewerEvents).QueryContext(context.WithoutCancel(ctx), userID, afterSeq, sqlLimit(limit))
	if err != nil {
		return nil, s.fail("viewer events", err)
	}
	defer rows.Close()
	out := []*service.ViewerEvent{}
	for rows.Next() {
		var seq int64
		var payload string
		if err := rows.Scan(&seq, &payload); err != nil {
			return nil, s.fail("viewer events", err)
		}
		e, err := service.DecodeViewerEvent(userID, seq, []byte(payload))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("viewer events", err)
	}
	return out, nil
}

// ViewerSeq implements service.UserStore.
func (s *Store) ViewerSeq(ctx context.Context, userID string) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var n int64
	if err := s.stmt(qViewerSeq).QueryRowContext(context.WithoutCancel(ctx), userID).Scan(&n); err != nil {
		return 0, s.fail("viewer seq", err)
	}
	return n, nil
}

// write runs f in a transaction on the writer connection.
func (s *Store) write(ctx context.Context, what string, f func(tx *sql.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return s.fail(what, err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		var se *service.Error
		if errors.As(err, &se) {
			return err
		}
		return s.fail(what, err)
	}
	if err := tx.Commit(); err != nil {
		return s.fail(what, err)
	}
	return nil
}

// exec runs a statement of a write and returns how many rows it changed.
func exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// PruneViewerEvents implements service.UserStore.
func (s *Store) PruneViewerEvents(ctx context.Context, before time.Time) (n int64, err error) {
	err = s.write(ctx, "pruning viewer events", func(tx *sql.Tx) error {
		n, err = exec(ctx, tx, qPruneViewer, dbTime(before))
		return err
	})
	return n, err
}

// CreateWebhook implements service.UserStore.
func (s *Store) CreateWebhook(ctx context.Context, w *service.Webhook, limit int) error {
	return s.write(ctx, "creating a webhook", func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, qCountWebhooks, w.UserID).Scan(&n); err != nil {
			return err
		}
		if n >= limit {
			return service.Errorf(service.EINVALID, "you have %d webhooks, at most %d", n, limit)
		}
		args, err := webhookArgs(w)
		if err != nil {
			return err
		}
		if _, err = tx.ExecContext(ctx, qInsertWebhook, args...); err != nil {
			return err
		}
		s.hooked[w.UserID] = true
		return nil
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
	err = s.write(ctx, "updating a webhook", func(tx *sql.Tx) error {
		w, err = scanWebhook(tx.QueryRowContext(ctx, qWebhook, id))
		if errors.Is(err, sql.ErrNoRows) {
			return service.Errorf(service.ENOTFOUND, "webhook not found")
		} else if err != nil {
			return err
		}
		c.Apply(w)
		args, err := webhookArgs(w)
		if err != nil {
			return err
		}
		// The columns it changes, from url on (see qUpdateWebhook).
		_, err = tx.ExecContext(ctx, qUpdateWebhook, args[2], args[3], args[4], args[5], args[6], args[8], args[9], args[10], args[11], id)
		return err
	})
	return w, err
}

// DeleteWebhook implements service.UserStore.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	return s.write(ctx, "deleting a webhook", func(tx *sql.Tx) error {
		n, err := exec(ctx, tx, qDeleteWebhook, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return service.Errorf(service.ENOTFOUND, "webhook not found")
		}
		clear(s.hooked) // whose it was is read again
		_, err = tx.ExecContext(ctx, qDeleteDeliveries, id)
		return err
	})
}

// Deliveries implements service.UserStore.
func (s *Store) Deliveries(ctx context.Context, webhookID string, after *service.DeliveryPosition, limit int) ([]*service.Delivery, error) {
	if after == nil {
		return getAll(ctx, s, "deliveries", scanDelivery, qDeliveries, webhookID, sqlLimit(limit))
	}
	return getAll(ctx, s, "deliveries", scanDelivery, qDeliveriesAft, webhookID, dbTime(after.CreatedAt), after.ID, sqlLimit(limit))
}

// Delivery implements service.UserStore.
func (s *Store) Delivery(ctx context.Context, id string) (*service.Delivery, error) {
	return getOne(ctx, s, "delivery", id, qDelivery, scanDelivery, id)
}

// ClaimDeliveries implements service.UserStore. Whether any delivery is due is read
// first, on the read pool: most of the time none is, and the writer is not taken.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) (out []*service.Delivery, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var due bool
	if err := s.stmt(qAnyDue).QueryRowContext(context.WithoutCancel(ctx), dbTime(now)).Scan(&due); err != nil {
		return nil, s.fail("claiming deliveries", err)
	}
	if !due {
		return nil, nil
	}
	err = s.write(ctx, "claiming deliveries", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, qClaimDeliveries, owner, dbTime(until), dbTime(now), sqlLimit(limit))
		if err != nil {
			return err
		}
		out = nil
		for rows.Next() {
			d, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, d := range out {
			if d.Webhook, err = scanWebhook(tx.QueryRowContext(ctx, qWebhook, d.WebhookID)); err != nil {
				return err
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b *service.Delivery) int {
		return cmp.Or(a.NextAttemptAt.Compare(*b.NextAttemptAt), strings.Compare(a.ID, b.ID))
	})
	return out, err
}

// FinishAttempt implements service.UserStore.
func (s *Store) FinishAttempt(ctx context.Context, owner string, a *service.Attempt) error {
	return s.write(ctx, "recording an attempt", func(tx *sql.Tx) error {
		var leaseOwner, webhookID string
		var attempts int
		var once bool
		err := tx.QueryRowContext(ctx, qLeaseOf, a.DeliveryID).Scan(&leaseOwner, &webhookID, &attempts, &once)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && leaseOwner != owner) {
			return service.Errorf(service.ECONFLICT, "the delivery is not leased to %s", owner)
		} else if err != nil {
			return err
		}
		status, next, delivered := service.DeliveryFailed, any(nil), any(nil)
		switch {
		case a.Delivered:
			status, delivered = service.DeliveryDelivered, dbTime(a.At)
		case a.Next != nil && !once:
			status, next = service.DeliveryPending, dbTime(*a.Next)
		}
		if _, err := tx.ExecContext(ctx, qFinishAttempt, a.StatusCode, a.Error, string(status), next, delivered, false, a.DeliveryID); err != nil {
			return err
		}
		switch status {
		case service.DeliveryDelivered:
			_, err = tx.ExecContext(ctx, qWebhookDelivered, webhookID)
		case service.DeliveryFailed:
			_, err = tx.ExecContext(ctx, qWebhookFailed, webhookID, a.DisableAfter, a.DisableReason)
		}
		if err == nil && a.Disable != "" {
			_, err = tx.ExecContext(ctx, qDisableWebhook, a.Disable, webhookID)
		}
		return err
	})
}

// Redeliver implements service.UserStore.
func (s *Store) Redeliver(ctx context.Context, id string, at time.Time) (d *service.Delivery, err error) {
	err = s.write(ctx, "redelivering", func(tx *sql.Tx) error {
		n, err := exec(ctx, tx, qRedeliver, dbTime(at), id)
		if err != nil {
			return err
		}
		if n == 0 {
			return service.Errorf(service.ENOTFOUND, "delivery not found")
		}
		d, err = scanDelivery(tx.QueryRowContext(ctx, qDelivery, id))
		return err
	})
	return d, err
}

// PruneDeliveries implements service.UserStore.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (n int64, err error) {
	err = s.write(ctx, "pruning deliveries", func(tx *sql.Tx) error {
		n, err = exec(ctx, tx, qPruneDeliveries, dbTime(before))
		return err
	})
	return n, err
}
