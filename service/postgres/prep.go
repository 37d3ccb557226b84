package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/talkgraph/talkgraph/service"
)

// prep is a batch checked and encoded, once per Append call.
type prep struct {
	b       *service.Batch
	ch      service.Changes
	events  []eventRow
	create  string   // the settings of b.Create, as JSON
	update  string   // the settings of ch.Session, as JSON
	usage   []string // the usage of each of ch.Runs, as JSON ("" for none)
	choices []string // the choices of each of ch.Questions, as JSON ("" for nil)
	viewer  []string // the payload of each of ch.Viewer
}

// prepare checks b on its face (Batch.Check, and what PostgreSQL cannot store) and encodes
// it; the error is EINVALID.
func prepare(b *service.Batch) (*prep, error) {
	ch, err := b.Derive()
	if err != nil {
		return nil, service.Errorf(service.EINVALID, "%v", err)
	}
	p := &prep{b: b, ch: ch}
	if err := p.encode(); err != nil {
		return nil, service.Errorf(service.EINVALID, "batch for session %s: %v", b.SessionID, err)
	}
	return p, nil
}

// encode checks what the batch writes to identifier columns (text, which cannot hold NUL
// or invalid UTF-8) and time columns (int64 nanoseconds), and encodes its JSON.
func (p *prep) encode() error {
	b, ch := p.b, &p.ch
	var v validator
	v.ids(b.SessionID)
	if c := b.Create; c != nil {
		v.ids(c.UserID)
		v.times(c.CreatedAt, c.UpdatedAt)
		p.create = v.json(c.Settings)
	}
	p.events = make([]eventRow, 0, len(b.Events))
	for _, e := range b.Events {
		v.ids(string(e.Type), e.Key, e.MessageID)
		v.times(e.At)
		r, err := encodeEvent(e)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		p.events = append(p.events, r)
	}
	if r := b.Idempotency; r != nil {
		v.ids(r.UserID, r.Key, r.MessageID, r.RunID)
		v.times(r.CreatedAt)
	}
	if a := b.Admit; a != nil {
		v.ids(a.UserID, a.RunID)
	}
	if sp := b.Spend; sp != nil {
		v.ids(append([]string{sp.UserID, sp.Period}, sp.Holds...)...)
	}
	if s := ch.Session; s != nil {
		v.times(s.UpdatedAt)
		p.update = v.json(s.Settings)
	}
	v.times(ch.Activity)
	for _, m := range ch.Messages {
		v.ids(m.ID, string(m.Role), string(m.Kind), string(m.Status), m.RunID, m.QuestionID)
		v.times(m.CreatedAt)
	}
	for _, r := range ch.Runs {
		v.ids(r.ID, r.UserID, string(r.Status), r.Agent, r.Owner)
		v.times(r.CreatedAt)
		v.nullTimes(r.StartedAt, r.FinishedAt)
		usage := ""
		if r.Usage != nil {
			usage = v.json(r.Usage)
		}
		p.usage = append(p.usage, usage)
	}
	for _, q := range ch.Questions {
		v.ids(q.ID, q.RunID, q.WithdrawnReason, q.ToolCallID)
		v.times(q.AskedAt)
		v.nullTimes(q.AnsweredAt, q.ExpiresAt)
		choices := ""
		if q.Choices != nil {
			choices = v.json(q.Choices)
		}
		p.choices = append(p.choices, choices)
	}
	for _, e := range ch.Viewer {
		v.ids(e.UserID)
		v.times(e.At)
		p.viewer = append(p.viewer, v.json(e))
	}
	for _, h := range ch.Hooks {
		v.ids(h.ID, h.UserID, h.Type, h.Body)
		v.times(h.At)
	}
	for _, tc := range ch.ToolCalls {
		v.ids(tc.ID, tc.RunID, tc.MessageID, string(tc.Status))
		v.times(tc.StartedAt)
		v.nullTimes(tc.FinishedAt)
		if a := tc.Approval; a != nil {
			v.times(a.ExpiresAt)
			v.nullTimes(a.DecidedAt)
		}
	}
	return v.err
}

// validator collects the first reason a batch cannot be stored.
type validator struct{ err error }

func (v *validator) ids(ids ...string) {
	for _, id := range ids {
		if v.err == nil && (strings.IndexByte(id, 0) >= 0 || !utf8.ValidString(id)) {
			v.err = fmt.Errorf("identifier %q has a NUL character or is not UTF-8", id)
		}
	}
}

func (v *validator) times(ts ...time.Time) {
	for _, t := range ts {
		if v.err == nil && !timeFits(t) {
			v.err = fmt.Errorf("time %v is outside the years %d to %d", t, minTime.Year(), maxTime.Year())
		}
	}
}

func (v *validator) nullTimes(ts ...*time.Time) {
	for _, t := range ts {
		if t != nil {
			v.times(*t)
		}
	}
}

func (v *validator) json(x any) string {
	b, err := json.Marshal(x)
	if err != nil && v.err == nil {
		v.err = err
	}
	return string(b)
}

// eachRow calls f with the table and ID of each row the batch writes.
func (p *prep) eachRow(f func(table, id string)) {
	for _, m := range p.ch.Messages {
		f("message", m.ID)
	}
	for _, r := range p.ch.Runs {
		f("run", r.ID)
	}
	for _, q := range p.ch.Questions {
		f("question", q.ID)
	}
	for _, tc := range p.ch.ToolCalls {
		f("tool call", tc.ID)
	}
}
