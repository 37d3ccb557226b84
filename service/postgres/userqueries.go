package postgres

// This file holds the SQL of what the store keeps per user (service.UserStore): the
// viewer logs, the webhooks and their deliveries, with their scans.

import (
	"github.com/talkgraph/talkgraph/service"
)

// Viewer logs.

const (
	// qInsertViewerEvents moves each user's counter on by their events of the round ($1,
	// $2, in user order), and inserts the events ($3…$7: user, place among the user's
	// events of the round from 1, the user's count, at, payload) numbered after where the
	// counter was.
	qInsertViewerEvents = `WITH c AS (
			INSERT INTO viewer_seqs AS v (user_id, seq)
			SELECT u, n FROM unnest($1::text[], $2::bigint[]) AS t (u, n) ORDER BY u
			ON CONFLICT (user_id) DO UPDATE SET seq = v.seq + EXCLUDED.seq
			RETURNING v.user_id, v.seq)
		INSERT INTO viewer_events (user_id, seq, at, payload)
		SELECT e.user_id, c.seq - e.n + e.k, e.at, e.payload
		FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[]) AS e (user_id, k, n, at, payload)
		JOIN c ON c.user_id = e.user_id`
	qViewerSeq    = `SELECT coalesce((SELECT seq FROM viewer_seqs WHERE user_id = $1), 0)`
	qViewerEvents = `SELECT seq, payload FROM viewer_events WHERE user_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`
	// qPruneViewer deletes each user's events up to the last one older than $1, so that
	// what stays of a log is its end, but never the user's newest (viewer_seqs holds its
	// Seq).
	qPruneViewer = `DELETE FROM viewer_events v
		USING (SELECT user_id, max(seq) AS seq FROM viewer_events WHERE at < $1 GROUP BY user_id) c
			JOIN viewer_seqs n ON n.user_id = c.user_id
		WHERE v.user_id = c.user_id AND v.seq <= c.seq AND v.seq < n.seq`
)

// Webhooks.

const webhookCols = `id, user_id, url, events, enabled, disabled_reason, description, created_at, secret,
	previous_secret, previous_until, failures`

const (
	qWebhook     = `SELECT ` + webhookCols + ` FROM webhooks WHERE id = $1`
	qWebhookLock = `SELECT ` + webhookCols + ` FROM webhooks WHERE id = $1 FOR UPDATE`
	qWebhooks    = `SELECT ` + webhookCols + ` FROM webhooks WHERE user_id = $1 ORDER BY created_at, id`
	qWebhooksIn  = `SELECT ` + webhookCols + ` FROM webhooks WHERE id = ANY($1::text[])`
	// qLockUserWebhooks serialises the creations of one user's webhooks (the third key of
	// talkgraph's advisory locks), so that two replicas never both pass the limit.
	qLockUserWebhooks = `SELECT pg_advisory_xact_lock(1950810115, hashtext($1))`
	qCountWebhooks    = `SELECT count(*) FROM webhooks WHERE user_id = $1`
	qInsertWebhook    = `INSERT INTO webhooks (` + webhookCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	qUpdateWebhook    = `UPDATE webhooks SET url = $2, events = $3, enabled = $4, disabled_reason = $5, description = $6,
		secret = $7, previous_secret = $8, previous_until = $9, failures = $10 WHERE id = $1`
	qDeleteWebhook = `DELETE FROM webhooks WHERE id = $1` // its deliveries go by ON DELETE CASCADE
)

func webhookArgs(w *service.Webhook) []any {
	return []any{w.ID, w.UserID, dbText(w.URL), w.Events, w.Enabled, dbText(w.DisabledReason), dbText(w.Description),
		dbTime(w.CreatedAt), w.Secret, w.PreviousSecret, dbNullTime(w.PreviousUntil), w.Failures}
}

func scanWebhook(row scanner) (*service.Webhook, error) {
	var w service.Webhook
	var created int64
	var until *int64
	err := row.Scan(&w.ID, &w.UserID, textCol{&w.URL}, &w.Events, &w.Enabled, textCol{&w.DisabledReason},
		textCol{&w.Description}, &created, &w.Secret, &w.PreviousSecret, &until, &w.Failures)
	w.CreatedAt, w.PreviousUntil = goTime(created), goNullTime(until)
	return &w, err
}

// Deliveries.

const deliveryCols = `id, webhook_id, user_id, event_id, type, payload, status, attempts, last_status_code,
	last_error, next_attempt_at, created_at, delivered_at, once`

const (
	// qInsertDeliveries makes a delivery of each webhook event ($1…$5: user, event ID,
	// type, body, at) for each enabled webhook of its user that takes its type.
	qInsertDeliveries = `INSERT INTO webhook_deliveries (id, webhook_id, user_id, event_id, type, payload, status,
			next_attempt_at, created_at)
		SELECT gen_random_uuid()::text, w.id, h.user_id, h.event_id, h.type, h.body, $6, h.at, h.at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) AS h (user_id, event_id, type, body, at)
		JOIN webhooks w ON w.user_id = h.user_id AND w.enabled AND h.type = ANY (w.events)`
	qDelivery      = `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE id = $1`
	qDeliveries    = `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2`
	qDeliveriesAft = `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE webhook_id = $1 AND (created_at, id) < ($2, $3)
		ORDER BY created_at DESC, id DESC LIMIT $4`
	// qClaimDeliveries leases the due deliveries of enabled webhooks whose lease lapsed;
	// of two replicas claiming at once, each skips what the other locked.
	qClaimDeliveries = `UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 WHERE id IN (
		SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.status = 'PENDING' AND d.next_attempt_at <= $3 AND w.enabled
			AND (d.lease_owner = '' OR d.lease_until < $3)
		ORDER BY d.next_attempt_at, d.id LIMIT $4 FOR UPDATE OF d SKIP LOCKED) RETURNING ` + deliveryCols
	qLeaseOf       = `SELECT lease_owner, webhook_id, once FROM webhook_deliveries WHERE id = $1 FOR UPDATE`
	qFinishAttempt = `UPDATE webhook_deliveries SET attempts = attempts + 1, last_status_code = $2, last_error = $3,
		status = $4, next_attempt_at = $5, delivered_at = coalesce($6, delivered_at), once = false,
		lease_owner = '', lease_until = NULL WHERE id = $1`
	// qWebhookFailed counts a delivery failed in a row, and disables the webhook when it
	// makes $2 of them ($2 > 0) with the reason $3.
	qWebhookFailed = `UPDATE webhooks SET failures = failures + 1,
		enabled = CASE WHEN $2 > 0 AND failures + 1 >= $2 THEN false ELSE enabled END,
		disabled_reason = CASE WHEN $2 > 0 AND failures + 1 >= $2 AND enabled THEN $3 ELSE disabled_reason END
		WHERE id = $1`
	qWebhookDelivered = `UPDATE webhooks SET failures = 0 WHERE id = $1`
	qDisableWebhook   = `UPDATE webhooks SET enabled = false, disabled_reason = $2 WHERE id = $1`
	qRedeliver        = `UPDATE webhook_deliveries SET once = (status = 'PENDING' AND once) OR status <> 'PENDING',
		status = 'PENDING', next_attempt_at = $2 WHERE id = $1 RETURNING ` + deliveryCols
	qPruneDeliveries = `DELETE FROM webhook_deliveries WHERE status <> 'PENDING' AND created_at < $1`
)

func scanDelivery(row scanner) (*service.Delivery, error) {
	var d service.Delivery
	var next, delivered *int64
	var created int64
	err := row.Scan(&d.ID, &d.WebhookID, &d.UserID, &d.EventID, &d.Type, &d.Payload, &d.Status, &d.Attempts,
		&d.LastStatusCode, textCol{&d.LastError}, &next, &created, &delivered, &d.Once)
	d.NextAttemptAt, d.CreatedAt, d.DeliveredAt = goNullTime(next), goTime(created), goNullTime(delivered)
	return &d, err
}
