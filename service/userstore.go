package service

import (
	"context"
	"slices"
	"time"
)

// This file is the part of the Store contract that belongs to a user rather than to one
// of their sessions: their viewer log, and their webhooks with the outbox of deliveries.
// Append writes the viewer events and the deliveries a batch tells (Changes.Viewer,
// Changes.Hooks) in the transaction that writes the batch; everything else here is read,
// or changed by the service outside any session's log.

// UserStore is what a Store keeps per user. The errors are Store's.
type UserStore interface {
	// ViewerEvents returns up to limit events of userID's viewer log with Seq > afterSeq,
	// by Seq. Append numbers a user's events 1, 2, 3, … in the order their transactions
	// commit, with no gap, whatever the sessions and processes that write them: a reader
	// that has every event up to n and reads after n never misses one. Empty for a user
	// with none.
	ViewerEvents(ctx context.Context, userID string, afterSeq int64, limit int) ([]*ViewerEvent, error)
	// ViewerSeq returns the Seq of userID's last viewer event, 0 before any; pruning never
	// moves it back.
	ViewerSeq(ctx context.Context, userID string) (int64, error)
	// PruneViewerEvents deletes, for each user, their viewer events up to the last one
	// whose At is before before, but never the user's newest, whatever its age: what stays
	// of a log is always its end, with no hole, and never empty once it had an event, so
	// that a reader behind what was pruned finds the gap at its next read (the first event
	// it reads is not the one after its position) rather than taking an empty log for
	// caught up. It returns how many it deleted.
	PruneViewerEvents(ctx context.Context, before time.Time) (int64, error)

	// CreateWebhook stores w, a new webhook, unless its user has limit webhooks or more
	// (EINVALID then, and nothing is stored); of several processes creating at once, no
	// more than limit get through.
	CreateWebhook(ctx context.Context, w *Webhook, limit int) error
	// Webhooks returns userID's webhooks, oldest first (CreatedAt, then ID).
	Webhooks(ctx context.Context, userID string) ([]*Webhook, error)
	// Webhook returns one webhook; ENOTFOUND when missing. It does not check the owner.
	Webhook(ctx context.Context, id string) (*Webhook, error)
	// UpdateWebhook changes the webhook id as c says and returns it as it is then;
	// ENOTFOUND when missing.
	UpdateWebhook(ctx context.Context, id string, c WebhookChange) (*Webhook, error)
	// DeleteWebhook deletes the webhook and its deliveries; ENOTFOUND when missing.
	DeleteWebhook(ctx context.Context, id string) error

	// Deliveries returns up to limit deliveries of the webhook, newest first (CreatedAt,
	// then ID, descending), strictly after the given position when after is not nil.
	Deliveries(ctx context.Context, webhookID string, after *DeliveryPosition, limit int) ([]*Delivery, error)
	// Delivery returns one delivery; ENOTFOUND when missing.
	Delivery(ctx context.Context, id string) (*Delivery, error)
	// ClaimDeliveries leases to owner, until until, up to limit PENDING deliveries of
	// enabled webhooks that are due at now (NextAttemptAt not after it) and whose lease,
	// if any, has lapsed, and returns them, earliest due first, each with its Webhook.
	// Two processes claiming at once never both get a delivery.
	ClaimDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]*Delivery, error)
	// FinishAttempt records an attempt of a delivery that owner holds the lease of, and
	// lets the lease go (see Attempt); ECONFLICT, recording nothing, when the lease is not
	// owner's any more.
	FinishAttempt(ctx context.Context, owner string, a *Attempt) error
	// Redeliver has the delivery attempted once more at at: PENDING again, due at at,
	// and, when it had ended, ending after that one attempt (Delivery.Once). It returns
	// the delivery as it is then; ENOTFOUND when missing.
	Redeliver(ctx context.Context, id string, at time.Time) (*Delivery, error)
	// PruneDeliveries deletes the deliveries that ended (DELIVERED or FAILED) and were
	// made before before; it returns how many.
	PruneDeliveries(ctx context.Context, before time.Time) (int64, error)
}

// Webhook is an address of a user's that is sent the events of the types it takes.
type Webhook struct {
	ID     string
	UserID string
	URL    string
	Events []string
	// Enabled is cleared by the user, or by the server with DisabledReason saying why.
	Enabled        bool
	DisabledReason string
	Description    string
	CreatedAt      time.Time
	// Secret is the signing secret as the service sealed it; PreviousSecret, until
	// PreviousUntil, the one a rotation replaced, which signs beside it meanwhile.
	Secret         []byte
	PreviousSecret []byte
	PreviousUntil  *time.Time
	// Failures counts the deliveries that ended FAILED since the last DELIVERED one.
	Failures int
}

// WebhookChange changes a webhook; nil fields stay as they are. Enabled true also clears
// DisabledReason and Failures.
type WebhookChange struct {
	URL         *string
	Events      []string
	Enabled     *bool
	Description *string
	// Secret, when set, becomes the secret; the one it replaces becomes PreviousSecret
	// until PreviousUntil.
	Secret        []byte
	PreviousUntil time.Time
}

// Apply changes w as c says: the one rule every store's UpdateWebhook follows.
func (c WebhookChange) Apply(w *Webhook) {
	if c.URL != nil {
		w.URL = *c.URL
	}
	if c.Events != nil {
		w.Events = slices.Clone(c.Events)
	}
	if c.Description != nil {
		w.Description = *c.Description
	}
	if c.Enabled != nil {
		w.Enabled = *c.Enabled
		if w.Enabled {
			w.DisabledReason, w.Failures = "", 0
		}
	}
	if c.Secret != nil {
		until := c.PreviousUntil.UTC()
		w.PreviousSecret, w.PreviousUntil, w.Secret = w.Secret, &until, slices.Clone(c.Secret)
	}
}

// DeliveryStatus is where a delivery is in its life.
type DeliveryStatus string

const (
	DeliveryPending   DeliveryStatus = "PENDING"
	DeliveryDelivered DeliveryStatus = "DELIVERED"
	DeliveryFailed    DeliveryStatus = "FAILED"
)

// Delivery is one event to send to one webhook: an outbox row, written with the change
// it tells of, attempted until it is delivered or fails.
type Delivery struct {
	ID        string
	WebhookID string
	UserID    string
	// EventID is the event's id (HookEvent.ID), the webhook-id of each attempt.
	EventID string
	Type    string
	Payload string
	Status  DeliveryStatus
	// Attempts counts the attempts made; LastStatusCode (0: none) and LastError say how
	// the last went.
	Attempts       int
	LastStatusCode int
	LastError      string
	// NextAttemptAt is when it is attempted next (nil once it ended).
	NextAttemptAt *time.Time
	CreatedAt     time.Time
	DeliveredAt   *time.Time
	// Once is set on a delivery that ended and was redelivered: it ends after its next
	// attempt.
	Once bool
	// Webhook is the webhook it goes to, as ClaimDeliveries reads it (nil elsewhere).
	Webhook *Webhook
}

// DeliveryPosition is a place in a webhook's list of deliveries.
type DeliveryPosition struct {
	CreatedAt time.Time
	ID        string
}

// Attempt is how one attempt of a delivery went, and what follows.
type Attempt struct {
	DeliveryID string
	At         time.Time
	// StatusCode is the receiver's answer (0: none came), Error why it is not a success.
	StatusCode int
	Error      string
	// Delivered: the receiver took it. Otherwise, Next is when to try again, nil when the
	// delivery ends FAILED now.
	Delivered bool
	Next      *time.Time
	// Disable, when set, disables the webhook now with this reason (410 Gone).
	Disable string
	// DisableAfter disables the webhook, with DisableReason, when this attempt ends its
	// delivery FAILED and that makes DisableAfter deliveries failed in a row (0: never).
	DisableAfter  int
	DisableReason string
}
