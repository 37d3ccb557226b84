package sqlite

// The SQL of budgets and schedules (see queries.go for the rest), with their argument
// lists and scan helpers.

import (
	"encoding/json"

	"github.com/talkgraph/talkgraph/service"
)

// Usage and reservations.

const (
	qSpendSession = `INSERT INTO session_usage (session_id, input_tokens, output_tokens) VALUES (?, ?, ?)
		ON CONFLICT (session_id) DO UPDATE SET input_tokens = input_tokens + excluded.input_tokens,
		output_tokens = output_tokens + excluded.output_tokens`
	qSpendUser = `INSERT INTO user_usage (user_id, period, input_tokens, output_tokens) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id, period) DO UPDATE SET input_tokens = input_tokens + excluded.input_tokens,
		output_tokens = output_tokens + excluded.output_tokens`
	qSettleHold         = `DELETE FROM usage_holds WHERE id = ?`
	qDeleteSessionUsage = `DELETE FROM session_usage WHERE session_id = ?`
	qDeleteSessionHolds = `DELETE FROM usage_holds WHERE session_id = ?`
	qSessionUsage       = `SELECT input_tokens, output_tokens FROM session_usage WHERE session_id = ?`
	qUserUsage          = `SELECT input_tokens, output_tokens FROM user_usage WHERE user_id = ? AND period = ?`
	qDropLapsedHolds    = `DELETE FROM usage_holds WHERE until <= ?`
	qSessionHeld        = `SELECT coalesce(sum(tokens), 0) FROM usage_holds WHERE session_id = ?`
	qUserHeld           = `SELECT coalesce(sum(tokens), 0) FROM usage_holds WHERE user_id = ? AND period = ?`
	qInsertHold         = `INSERT INTO usage_holds (id, session_id, user_id, period, tokens, until) VALUES (?, ?, ?, ?, ?, ?)`
)

// Schedules.

const scheduleCols = `id, user_id, guest, content, session_id, title, settings, cron, at, timezone, overlap,
	catch_up, end_at, max_fires, enabled, disabled_reason, created_at, updated_at, fires, checked, next_at, version`

const (
	qInsertSchedule = `INSERT INTO schedules (` + scheduleCols + `) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		?, ?, ?, ?, ?, ?, ?, ?, ? WHERE (SELECT count(*) FROM schedules WHERE user_id = ?) < ?`
	qCountSchedules = `SELECT count(*) FROM schedules WHERE user_id = ?`
	qUpdateSchedule = `UPDATE schedules SET (` + scheduleCols + `) = (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		?, ?, ?, ?, ?, ?, ?, ?) WHERE id = ? AND version = ?`
	qScheduleVersion = `SELECT version FROM schedules WHERE id = ?`
	qDeleteSchedule  = `DELETE FROM schedules WHERE id = ?`
	qDeleteFires     = `DELETE FROM schedule_fires WHERE schedule_id = ?`
	qSchedule        = `SELECT ` + scheduleCols + ` FROM schedules WHERE id = ?`
	qUserSchedules   = `SELECT ` + scheduleCols + ` FROM schedules WHERE user_id = ? ORDER BY created_at, id`
	qDueSchedules    = `SELECT ` + scheduleCols + ` FROM schedules WHERE enabled = 1 AND next_at IS NOT NULL AND next_at <= ? ORDER BY next_at, id LIMIT ?`
	qDisableSchedule = `UPDATE schedules SET enabled = 0, disabled_reason = ?, next_at = NULL, version = version + 1 WHERE id = ?`
	qInsertFire      = `INSERT INTO schedule_fires (` + fireCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (schedule_id, slot) DO NOTHING`
	qFinishFire      = `UPDATE schedule_fires SET fired_at = ?, outcome = ?, reason = ?, session_id = ?, run_id = ? WHERE id = ? RETURNING schedule_id`
	qFires           = `SELECT ` + fireCols + ` FROM schedule_fires WHERE schedule_id = ? AND outcome <> '' ORDER BY scheduled_at DESC, id DESC LIMIT ?`
	qFiresBefore     = `SELECT ` + fireCols + ` FROM schedule_fires WHERE schedule_id = ? AND outcome <> '' AND (scheduled_at, id) < (?, ?) ORDER BY scheduled_at DESC, id DESC LIMIT ?`
	qPendingFires    = `SELECT ` + fireCols + ` FROM schedule_fires WHERE outcome = '' AND attempt < ? ORDER BY attempt, id LIMIT ?`
	qRetakeFire      = `UPDATE schedule_fires SET attempt = ? WHERE id = ? AND outcome = '' AND attempt = ?`
	fireCols         = `id, schedule_id, user_id, slot, scheduled_at, attempt, fired_at, outcome, reason, session_id, run_id`
)

func init() {
	reads = append(reads, qSessionUsage, qUserUsage, qSchedule, qUserSchedules, qDueSchedules, qFires, qFiresBefore, qPendingFires)
	writes = append(writes, qSpendSession, qSpendUser, qSettleHold, qDeleteSessionUsage, qDeleteSessionHolds)
}

func scheduleArgs(sc *service.Schedule) ([]any, error) {
	var settings any
	if sc.Settings != nil {
		b, err := json.Marshal(sc.Settings)
		if err != nil {
			return nil, err
		}
		settings = string(b)
	}
	var maxFires any
	if sc.MaxFires != nil {
		maxFires = *sc.MaxFires
	}
	return []any{sc.ID, sc.UserID, sc.Guest, sc.Content, sc.SessionID, sc.Title, settings, sc.Cron, dbNullTime(sc.At),
		sc.Timezone, string(sc.Overlap), string(sc.CatchUp), dbNullTime(sc.EndAt), maxFires, sc.Enabled, sc.DisabledReason,
		dbTime(sc.CreatedAt), dbTime(sc.UpdatedAt), sc.Fires, dbTime(sc.Checked), dbNullTime(sc.NextAt), sc.Version}, nil
}

func scanSchedule(sc scanner) (*service.Schedule, error) {
	var s service.Schedule
	var maxFires *int64
	err := sc.Scan(&s.ID, &s.UserID, &s.Guest, &s.Content, &s.SessionID, &s.Title, jsonCol{&s.Settings}, &s.Cron,
		nullTimeCol{&s.At}, &s.Timezone, &s.Overlap, &s.CatchUp, nullTimeCol{&s.EndAt}, &maxFires, &s.Enabled,
		&s.DisabledReason, timeCol{&s.CreatedAt}, timeCol{&s.UpdatedAt}, &s.Fires, timeCol{&s.Checked},
		nullTimeCol{&s.NextAt}, &s.Version)
	if maxFires != nil {
		n := int(*maxFires)
		s.MaxFires = &n
	}
	return &s, err
}

func fireArgs(f *service.ScheduleFire) []any {
	return []any{f.ID, f.ScheduleID, f.UserID, f.Slot, dbTime(f.ScheduledAt), dbTime(f.Attempt), dbNullTime(f.FiredAt),
		string(f.Outcome), f.Reason, f.SessionID, f.RunID}
}

func scanFire(sc scanner) (*service.ScheduleFire, error) {
	var f service.ScheduleFire
	err := sc.Scan(&f.ID, &f.ScheduleID, &f.UserID, &f.Slot, timeCol{&f.ScheduledAt}, timeCol{&f.Attempt},
		nullTimeCol{&f.FiredAt}, &f.Outcome, &f.Reason, &f.SessionID, &f.RunID)
	return &f, err
}
