package sqlite

// This file holds the SQL of what the store keeps per user (service.UserStore): the
// viewer logs, the webhooks and their deliveries, with their argument lists and scans.

import (
	"encoding/json"

	"github.com/talkgraph/talkgraph/service"
)

// Viewer logs.

const (
	// qViewerLast is the Seq of a user's last viewer event, 0 before any: this store has
	// one writer, which numbers after it, and pruning keeps each user's last event.
	qViewerLast   = `SELECT coalesce(max(seq), 0) FROM viewer_events WHERE user_id = ?`
	qViewerSeq    = qViewerLast
	qViewerEvents = `SELECT seq, payload FROM viewer_events WHERE user_id = ? AND seq > ? ORDER BY seq LIMIT ?`
	// qPruneViewer deletes each user's events up to the last one older than the time
	// given, so that what stays of a log is its end, but never a user's last event, from
	// which the numbering goes on.
	qPruneViewer = `WITH cut AS (SELECT user_id, max(seq) AS seq FROM viewer_events WHERE at < ? GROUP BY user_id),
			newest AS (SELECT user_id, max(seq) AS seq FROM viewer_events WHERE user_id IN (SELECT user_id FROM cut) GROUP BY user_id)
		DELETE FROM viewer_events WHERE EXISTS (SELECT 1 FROM cut JOIN newest USING (user_id)
			WHERE cut.user_id = viewer_events.user_id AND viewer_events.seq <= min(cut.seq, newest.seq - 1))`
)

var qInsertViewerEvents = multiRow(`INSERT INTO viewer_events (user_id, seq, at, payload)`, 4, "")

// Webhooks.

const webhookCols = `id, user_id, url, events, enabled, disabled_reason, description, created_at, secret,
	previous_secret, previous_until, failures`

const (
	qWebhook  = `SELECT ` + webhookCols + ` FROM webhooks WHERE id = ?`
	qWebhooks = `SELECT ` + webhookCols + ` FROM webhooks WHERE user_id = ? ORDER BY created_at, id`
	// qWebhooksToTell reads a user's enabled webhooks and the types they take.
	qWebhooksToTell = `SELECT id, events FROM webhooks WHERE user_id = ? AND enabled = 1`
	qCountWebhooks  = `SELECT count(*) FROM webhooks WHERE user_id = ?`
	// qAnyDue reports whether a delivery is due, read before a claim takes the writer.
	qAnyDue = `SELECT EXISTS (SELECT 1 FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.status = 'PENDING' AND d.next_attempt_at <= ?1 AND w.enabled = 1 AND (d.lease_owner = '' OR d.lease_until < ?1))`
	qInsertWebhook = `INSERT INTO webhooks (` + webhookCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qUpdateWebhook = `UPDATE webhooks SET url = ?, events = ?, enabled = ?, disabled_reason = ?, description = ?,
		secret = ?, previous_secret = ?, previous_until = ?, failures = ? WHERE id = ?`
	qDeleteWebhook    = `DELETE FROM webhooks WHERE id = ?`
	qDeleteDeliveries = `DELETE FROM webhook_deliveries WHERE webhook_id = ?`
)

func webhookArgs(w *service.Webhook) ([]any, error) {
	events, err := json.Marshal(w.Events)
	if err != nil {
		return nil, err
	}
	return []any{w.ID, w.UserID, w.URL, string(events), w.Enabled, w.DisabledReason, w.Description, dbTime(w.CreatedAt),
		w.Secret, w.PreviousSecret, dbNullTime(w.PreviousUntil), w.Failures}, nil
}

func scanWebhook(sc scanner) (*service.Webhook, error) {
	var w service.Webhook
	err := sc.Scan(&w.ID, &w.UserID, &w.URL, jsonCol{&w.Events}, &w.Enabled, &w.DisabledReason, &w.Description,
		timeCol{&w.CreatedAt}, &w.Secret, &w.PreviousSecret, nullTimeCol{&w.PreviousUntil}, &w.Failures)
	return &w, err
}

// Deliveries.

const deliveryCols = `id, webhook_id, user_id, event_id, type, payload, status, attempts, last_status_code,
	last_error, next_attempt_at, created_at, delivered_at, once`

const (
	qDelivery      = `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE id = ?`
	qDeliveries    = `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE webhook_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`
	qDeliveriesAft = `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE webhook_id = ? AND (created_at, id) < (?, ?)
		ORDER BY created_at DESC, id DESC LIMIT ?`
	// qClaimDeliveries leases the due deliveries of enabled webhooks whose lease lapsed
	// (the writer connection runs one statement at a time: nobody else claims meanwhile).
	qClaimDeliveries = `UPDATE webhook_deliveries SET lease_owner = ?1, lease_until = ?2 WHERE id IN (
		SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.status = 'PENDING' AND d.next_attempt_at <= ?3 AND w.enabled = 1
			AND (d.lease_owner = '' OR d.lease_until < ?3)
		ORDER BY d.next_attempt_at, d.id LIMIT ?4) RETURNING ` + deliveryCols
	qLeaseOf       = `SELECT lease_owner, webhook_id, attempts, once FROM webhook_deliveries WHERE id = ?`
	qFinishAttempt = `UPDATE webhook_deliveries SET attempts = attempts + 1, last_status_code = ?, last_error = ?, status = ?,
		next_attempt_at = ?, delivered_at = coalesce(?, delivered_at), once = ?, lease_owner = '', lease_until = NULL WHERE id = ?`
	// qWebhookFailed counts a delivery failed in a row, and disables the webhook when it
	// makes ?2 of them (?2 > 0) with the reason ?3.
	qWebhookFailed = `UPDATE webhooks SET failures = failures + 1,
		enabled = CASE WHEN ?2 > 0 AND failures + 1 >= ?2 THEN 0 ELSE enabled END,
		disabled_reason = CASE WHEN ?2 > 0 AND failures + 1 >= ?2 AND enabled = 1 THEN ?3 ELSE disabled_reason END
		WHERE id = ?1`
	qWebhookDelivered = `UPDATE webhooks SET failures = 0 WHERE id = ?`
	qDisableWebhook   = `UPDATE webhooks SET enabled = 0, disabled_reason = ? WHERE id = ?`
	qRedeliver        = `UPDATE webhook_deliveries SET once = CASE WHEN status = 'PENDING' THEN once ELSE 1 END,
		status = 'PENDING', next_attempt_at = ? WHERE id = ?`
	qPruneDeliveries = `DELETE FROM webhook_deliveries WHERE status != 'PENDING' AND created_at < ?`
)

var qInsertDeliveries = multiRow(`INSERT INTO webhook_deliveries (id, webhook_id, user_id, event_id, type, payload,
	status, next_attempt_at, created_at)`, 9, "")

func scanDelivery(sc scanner) (*service.Delivery, error) {
	var d service.Delivery
	err := sc.Scan(&d.ID, &d.WebhookID, &d.UserID, &d.EventID, &d.Type, &d.Payload, &d.Status, &d.Attempts,
		&d.LastStatusCode, &d.LastError, nullTimeCol{&d.NextAttemptAt}, timeCol{&d.CreatedAt}, nullTimeCol{&d.DeliveredAt}, &d.Once)
	return &d, err
}
