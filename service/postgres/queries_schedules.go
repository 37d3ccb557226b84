package postgres

// The SQL of budgets and schedules (see queries.go for the rest), with their argument
// lists and scan helpers.

import (
	"encoding/json"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/talkgraph/talkgraph/service"
)

// Usage and reservations.

const (
	// qSpendSessions and qSpendUsers add a round's spends, rows sorted by key.
	qSpendSessions = `INSERT INTO session_usage AS t (session_id, input_tokens, output_tokens)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])
		ON CONFLICT (session_id) DO UPDATE SET input_tokens = t.input_tokens + excluded.input_tokens,
			output_tokens = t.output_tokens + excluded.output_tokens`
	qSpendUsers = `INSERT INTO user_usage AS t (user_id, period, input_tokens, output_tokens)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
		ON CONFLICT (user_id, period) DO UPDATE SET input_tokens = t.input_tokens + excluded.input_tokens,
			output_tokens = t.output_tokens + excluded.output_tokens`
	qSettleHolds        = `DELETE FROM usage_holds WHERE id = ANY($1::text[])`
	qDeleteSessionHolds = `DELETE FROM usage_holds WHERE session_id = ANY($1::text[])`
	qSessionUsage       = `SELECT input_tokens, output_tokens FROM session_usage WHERE session_id = $1`
	qUserUsage          = `SELECT input_tokens, output_tokens FROM user_usage WHERE user_id = $1 AND period = $2`
	// qLockBudget serialises one user's reservations (advisory lock class 1950810115).
	qLockBudget      = `SELECT pg_advisory_xact_lock(1950810115, hashtext($1))`
	qDropLapsedHolds = `DELETE FROM usage_holds WHERE user_id = $1 AND until <= $2`
	// qWeigh reads in one snapshot what counts against both caps: a spend committing
	// meanwhile (its usage in, its hold out) is seen whole or not at all.
	qWeigh = `SELECT
		coalesce((SELECT input_tokens + output_tokens FROM session_usage WHERE session_id = $1), 0),
		coalesce((SELECT sum(tokens) FROM usage_holds WHERE session_id = $1), 0),
		coalesce((SELECT input_tokens + output_tokens FROM user_usage WHERE user_id = $2 AND period = $3), 0),
		coalesce((SELECT sum(tokens) FROM usage_holds WHERE user_id = $2 AND period = $3), 0)`
	qInsertHold = `INSERT INTO usage_holds (id, session_id, user_id, period, tokens, until) VALUES ($1, $2, $3, $4, $5, $6)`
)

// Schedules.

const scheduleCols = `id, user_id, guest, content, session_id, title, settings, cron, at, timezone, overlap,
	catch_up, end_at, max_fires, enabled, disabled_reason, created_at, updated_at, fires, checked, next_at, version`

const fireCols = `id, schedule_id, user_id, slot, scheduled_at, attempt, fired_at, outcome, reason, session_id, run_id`

const (
	// qInsertSchedule inserts a schedule while its user keeps fewer than $23, under the
	// user's budget lock (one user's schedules are few: the lock is never contended).
	qInsertSchedule = `INSERT INTO schedules (` + scheduleCols + `) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
		$12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22 WHERE (SELECT count(*) FROM schedules WHERE user_id = $2) < $23`
	qCountSchedules = `SELECT count(*) FROM schedules WHERE user_id = $1`
	qUpdateSchedule = `UPDATE schedules SET (` + scheduleCols + `) = ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
		$12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) WHERE id = $1 AND version = $23`
	qScheduleVersion = `SELECT version FROM schedules WHERE id = $1`
	qDeleteSchedule  = `DELETE FROM schedules WHERE id = $1` // its fires go by ON DELETE CASCADE
	qSchedule        = `SELECT ` + scheduleCols + ` FROM schedules WHERE id = $1`
	qUserSchedules   = `SELECT ` + scheduleCols + ` FROM schedules WHERE user_id = $1 ORDER BY created_at, id`
	qDueSchedules    = `SELECT ` + scheduleCols + ` FROM schedules WHERE enabled AND next_at IS NOT NULL AND next_at <= $1
		ORDER BY next_at, id LIMIT $2`
	qDisableSchedule = `UPDATE schedules SET enabled = false, disabled_reason = $1, next_at = NULL, version = version + 1 WHERE id = $2`
	qInsertFire      = `INSERT INTO schedule_fires (` + fireCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (schedule_id, slot) DO NOTHING`
	qFinishFire = `UPDATE schedule_fires SET fired_at = $1, outcome = $2, reason = $3, session_id = $4, run_id = $5
		WHERE id = $6 RETURNING schedule_id`
	qFires       = `SELECT ` + fireCols + ` FROM schedule_fires WHERE schedule_id = $1 AND outcome <> '' ORDER BY scheduled_at DESC, id DESC LIMIT $2`
	qFiresBefore = `SELECT ` + fireCols + ` FROM schedule_fires WHERE schedule_id = $1 AND outcome <> '' AND (scheduled_at, id) < ($2, $3)
		ORDER BY scheduled_at DESC, id DESC LIMIT $4`
	qPendingFires = `SELECT ` + fireCols + ` FROM schedule_fires WHERE outcome = '' AND attempt < $1 ORDER BY attempt, id LIMIT $2`
	qRetakeFire   = `UPDATE schedule_fires SET attempt = $1 WHERE id = $2 AND outcome = '' AND attempt = $3`
)

func scheduleArgs(sc *service.Schedule) ([]any, error) {
	settings := pgtype.Text{}
	if sc.Settings != nil {
		b, err := json.Marshal(sc.Settings)
		if err != nil {
			return nil, err
		}
		settings = pgtype.Text{String: string(b), Valid: true}
	}
	maxFires := pgtype.Int4{}
	if sc.MaxFires != nil {
		maxFires = pgtype.Int4{Int32: int32(*sc.MaxFires), Valid: true}
	}
	return []any{sc.ID, sc.UserID, sc.Guest, dbText(sc.Content), sc.SessionID, dbText(sc.Title), settings, sc.Cron,
		dbNullTime(sc.At), sc.Timezone, string(sc.Overlap), string(sc.CatchUp), dbNullTime(sc.EndAt), maxFires, sc.Enabled,
		dbText(sc.DisabledReason), dbTime(sc.CreatedAt), dbTime(sc.UpdatedAt), sc.Fires, dbTime(sc.Checked),
		dbNullTime(sc.NextAt), sc.Version}, nil
}

func scanSchedule(row scanner) (*service.Schedule, error) {
	var s service.Schedule
	var settings []byte
	var at, endAt, nextAt *int64
	var maxFires *int32
	var created, updated, checked int64
	err := row.Scan(&s.ID, &s.UserID, &s.Guest, textCol{&s.Content}, &s.SessionID, textCol{&s.Title}, &settings, &s.Cron,
		&at, &s.Timezone, &s.Overlap, &s.CatchUp, &endAt, &maxFires, &s.Enabled, textCol{&s.DisabledReason}, &created,
		&updated, &s.Fires, &checked, &nextAt, &s.Version)
	if err != nil {
		return nil, err
	}
	s.At, s.EndAt, s.NextAt = goNullTime(at), goNullTime(endAt), goNullTime(nextAt)
	s.CreatedAt, s.UpdatedAt, s.Checked = goTime(created), goTime(updated), goTime(checked)
	if maxFires != nil {
		n := int(*maxFires)
		s.MaxFires = &n
	}
	if settings != nil {
		err = json.Unmarshal(settings, &s.Settings)
	}
	return &s, err
}

func fireArgs(f *service.ScheduleFire) []any {
	return []any{f.ID, f.ScheduleID, f.UserID, f.Slot, dbTime(f.ScheduledAt), dbTime(f.Attempt), dbNullTime(f.FiredAt),
		string(f.Outcome), dbText(f.Reason), f.SessionID, f.RunID}
}

func scanFire(row scanner) (*service.ScheduleFire, error) {
	var f service.ScheduleFire
	var scheduled, attempt int64
	var fired *int64
	err := row.Scan(&f.ID, &f.ScheduleID, &f.UserID, &f.Slot, &scheduled, &attempt, &fired, &f.Outcome,
		textCol{&f.Reason}, &f.SessionID, &f.RunID)
	f.ScheduledAt, f.Attempt, f.FiredAt = goTime(scheduled), goTime(attempt), goNullTime(fired)
	return &f, err
}
