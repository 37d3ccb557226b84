package inmem

import (
	"maps"
	"slices"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// The clone functions copy a row deeply, so that neither the caller nor the Store can see
// the other's later changes. Times are normalised the way a durable Store returns them:
// UTC, without a monotonic clock reading.

func cloneTime(t time.Time) time.Time { return t.UTC().Round(0) }

func cloneTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := cloneTime(*t)
	return &c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func cloneSession(s *service.TalkSession) *service.TalkSession {
	if s == nil {
		return nil
	}
	c := *s
	c.Settings.Model = clonePtr(s.Settings.Model)
	c.Settings.SystemPrompt = clonePtr(s.Settings.SystemPrompt)
	c.Settings.Temperature = clonePtr(s.Settings.Temperature)
	c.Settings.TokenBudget = clonePtr(s.Settings.TokenBudget)
	c.Settings.ToolPolicies = maps.Clone(s.Settings.ToolPolicies)
	c.CreatedAt = cloneTime(s.CreatedAt)
	c.UpdatedAt = cloneTime(s.UpdatedAt)
	return &c
}

func cloneMessage(m *service.Message) *service.Message {
	if m == nil {
		return nil
	}
	c := *m
	c.CreatedAt = cloneTime(m.CreatedAt)
	return &c
}

func cloneRun(r *service.Run) *service.Run {
	if r == nil {
		return nil
	}
	c := *r
	c.CreatedAt = cloneTime(r.CreatedAt)
	c.StartedAt = cloneTimePtr(r.StartedAt)
	c.FinishedAt = cloneTimePtr(r.FinishedAt)
	if r.Usage != nil {
		u := *r.Usage
		u.CachedInputTokens = clonePtr(r.Usage.CachedInputTokens)
		c.Usage = &u
	}
	return &c
}

func cloneQuestion(q *service.Question) *service.Question {
	if q == nil {
		return nil
	}
	c := *q
	c.Choices = slices.Clone(q.Choices) // keeps nil as nil and empty as empty
	c.Answer = clonePtr(q.Answer)
	c.AskedAt = cloneTime(q.AskedAt)
	c.AnsweredAt = cloneTimePtr(q.AnsweredAt)
	c.ExpiresAt = cloneTimePtr(q.ExpiresAt)
	return &c
}

func cloneToolCall(tc *service.ToolCall) *service.ToolCall {
	if tc == nil {
		return nil
	}
	c := *tc
	c.Result = clonePtr(tc.Result)
	c.Error = clonePtr(tc.Error)
	c.StartedAt = cloneTime(tc.StartedAt)
	c.FinishedAt = cloneTimePtr(tc.FinishedAt)
	if a := tc.Approval; a != nil {
		ca := *a
		ca.Decision = clonePtr(a.Decision)
		ca.DecidedAt = cloneTimePtr(a.DecidedAt)
		ca.ExpiresAt = cloneTime(a.ExpiresAt)
		c.Approval = &ca
	}
	return &c
}

func cloneEvent(e *service.Event) *service.Event {
	if e == nil {
		return nil
	}
	c := *e
	c.At = cloneTime(e.At)
	c.Message = cloneMessage(e.Message)
	c.Run = cloneRun(e.Run)
	c.Question = cloneQuestion(e.Question)
	c.ToolCall = cloneToolCall(e.ToolCall)
	c.Session = cloneSession(e.Session)
	if b := e.Branch; b != nil {
		c.Branch = &service.BranchSwitch{Off: slices.Clone(b.Off), On: slices.Clone(b.On)}
	}
	return &c
}

func cloneIdempotency(r *service.IdempotencyRecord) *service.IdempotencyRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.CreatedAt = cloneTime(r.CreatedAt)
	return &c
}
