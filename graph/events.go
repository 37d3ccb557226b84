package graph

import (
	"context"
	"time"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// event converts a log event to its GraphQL type; nil for a type the schema does not know
// (such an event is not shown). A message's question is the one the event carries, and
// its tool calls are read if asked for.
func (r *Resolver) event(ctx context.Context, ev *service.Event) model.SessionEvent {
	return r.eventAt(ctx, ev, service.EncodeCursor(ev.SessionID, service.CursorOf(ev)), nil)
}

// eventAt is event with the cursor cur, for a reader of a share link whose mask messages
// read through when mask is not nil (ev went through it already).
func (r *Resolver) eventAt(ctx context.Context, ev *service.Event, cur string, mask *service.ShareMask) model.SessionEvent {
	historyOf := func(ev *service.Event) *service.HistoryMessage {
		return &service.HistoryMessage{Message: *ev.Message, Question: ev.Question, Shared: mask}
	}
	switch ev.Type {
	case service.EventMessageAdded:
		return &model.MessageAdded{Cursor: cur, At: ev.At, Message: historyOf(ev)}
	case service.EventMessageChunk:
		return &model.MessageChunk{Cursor: cur, At: ev.At, MessageID: ev.MessageID, Delta: ev.Delta, Offset: ev.Offset}
	case service.EventMessageCompleted:
		return &model.MessageCompleted{Cursor: cur, At: ev.At, Message: historyOf(ev)}
	case service.EventRunStatusChanged:
		return &model.RunStatusChanged{Cursor: cur, At: ev.At, Run: ev.Run}
	case service.EventQuestionAsked:
		return &model.QuestionAsked{Cursor: cur, At: ev.At, Question: ev.Question}
	case service.EventQuestionAnswered:
		return &model.QuestionAnswered{Cursor: cur, At: ev.At, Question: ev.Question}
	case service.EventToolCallStarted:
		return &model.ToolCallStarted{Cursor: cur, At: ev.At, ToolCall: ev.ToolCall}
	case service.EventToolCallOutput:
		return &model.ToolCallOutput{Cursor: cur, At: ev.At, ToolCallID: ev.Key, MessageID: ev.MessageID, Delta: ev.Delta, Offset: ev.Offset}
	case service.EventToolCallFinished:
		return &model.ToolCallFinished{Cursor: cur, At: ev.At, ToolCall: ev.ToolCall}
	case service.EventToolApprovalRequested:
		return &model.ToolApprovalRequested{Cursor: cur, At: ev.At, ToolCall: ev.ToolCall}
	case service.EventToolApprovalDecided:
		return &model.ToolApprovalDecided{Cursor: cur, At: ev.At, ToolCall: ev.ToolCall}
	case service.EventQuestionWithdrawn:
		return &model.QuestionWithdrawn{Cursor: cur, At: ev.At, Question: ev.Question}
	case service.EventBranchSelected:
		return &model.BranchSelected{Cursor: cur, At: ev.At, LeafID: ev.Key}
	case service.EventSessionUpdated:
		if mask != nil {
			return nil // a reader sees no session's row
		}
		// The event carries the session's row as it was: a replay shows the title and
		// settings of then, and the cursor of the event; the state (status, active run,
		// pending question) is read at delivery.
		v, err := r.Service.View(ctx, ev.SessionID)
		if err != nil {
			v = &service.SessionView{Status: service.SessionIdle}
		}
		if ev.Session != nil {
			snap := *v
			snap.TalkSession, snap.StreamCursor = ev.Session, cur
			v = &snap
		}
		return &model.SessionUpdated{Cursor: cur, At: ev.At, Session: v}
	}
	return nil
}

func settingsInput(in *model.SessionSettingsInput) service.SettingsInput {
	if in == nil {
		return service.SettingsInput{}
	}
	set := service.SettingsInput{Agent: in.Agent, Model: in.Model, SystemPrompt: in.SystemPrompt, Temperature: in.Temperature,
		BusyPolicy: in.BusyPolicy, TokenBudget: in.TokenBudget}
	if len(in.ToolPolicies) > 0 {
		set.ToolPolicies = make(map[string]service.ToolPolicy, len(in.ToolPolicies))
		for _, p := range in.ToolPolicies {
			set.ToolPolicies[p.Tool] = p.Policy
		}
	}
	return set
}

// decisionInput is a decision on a tool call as the service takes it.
func decisionInput(in *model.DecideToolCallInput) service.Decision {
	d := service.Decision{ToolCallID: in.ToolCallID, Decision: in.Decision}
	if in.Arguments != nil {
		d.Arguments = *in.Arguments
	}
	if in.Reason != nil {
		d.Reason = *in.Reason
	}
	return d
}

// inputsOf is respondToInputs' answers and decisions as the service takes them.
func inputsOf(in *model.RespondToInputsInput) ([]service.Answer, []service.Decision) {
	var answers []service.Answer
	for _, a := range in.Answers {
		answers = append(answers, service.Answer{QuestionID: a.QuestionID, Answer: a.Answer})
	}
	var decisions []service.Decision
	for _, d := range in.Decisions {
		decisions = append(decisions, decisionInput(d))
	}
	return answers, decisions
}

// optional is s as a nullable String: null when empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// schedule wraps a schedule the service answered, for the API.
func schedule(svc *service.Service) func(*service.Schedule, error) (*model.Schedule, error) {
	return func(sc *service.Schedule, err error) (*model.Schedule, error) {
		if err != nil {
			return nil, err
		}
		return &model.Schedule{Schedule: sc, Svc: svc}, nil
	}
}

// scheduleInput is a new schedule as the service takes it.
func scheduleInput(in model.CreateScheduleInput) service.ScheduleInput {
	return service.ScheduleInput{Content: &in.Content, SessionID: in.SessionID, Title: in.Title, Settings: settingsOf(in.Settings),
		Cron: in.Cron, At: in.At, Timezone: in.Timezone, Overlap: in.Overlap, CatchUp: in.CatchUp, EndAt: in.EndAt,
		MaxFires: in.MaxFires, Enabled: in.Enabled}
}

// scheduleUpdate is what changes of a schedule, as the service takes it.
func scheduleUpdate(in model.UpdateScheduleInput) service.ScheduleInput {
	return service.ScheduleInput{Content: in.Content, SessionID: in.SessionID, Title: in.Title, Settings: settingsOf(in.Settings),
		Cron: in.Cron, At: in.At, Timezone: in.Timezone, Overlap: in.Overlap, CatchUp: in.CatchUp, EndAt: in.EndAt,
		MaxFires: in.MaxFires, Enabled: in.Enabled}
}

// settingsOf is settingsInput for settings that may be left out (nil).
func settingsOf(in *model.SessionSettingsInput) *service.SettingsInput {
	if in == nil {
		return nil
	}
	set := settingsInput(in)
	return &set
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// timesOf is a list of times as gqlgen writes [Time!]!.
func timesOf(ts []time.Time, err error) ([]*time.Time, error) {
	out := make([]*time.Time, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out, err
}
