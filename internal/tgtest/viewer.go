package tgtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ViewerQuery is the viewerEvents subscription the tests use.
const ViewerQuery = `subscription($a: String) { viewerEvents(after: $a) { __typename cursor at
	... on SessionChanged { session { id title status unread updatedAt streamCursor } }
	... on SessionRemoved { sessionId }
	... on RunEnded { run { id sessionId status } }
	... on InputRequested { sessionId question { id prompt } toolCall { id name } } } }`

// ViewerEvent is one event of viewerEvents.
type ViewerEvent struct {
	Typename string `json:"__typename"`
	Cursor   string
	At       time.Time
	Session  *struct {
		ID, Title, Status, StreamCursor string
		Unread                          bool
		UpdatedAt                       time.Time
	}
	SessionID string
	Run       *struct{ ID, SessionID, Status string }
	Question  *struct{ ID, Prompt string }
	ToolCall  *struct{ ID, Name string }
}

// Of returns the session the event is of.
func (e ViewerEvent) Of() string {
	switch {
	case e.Session != nil:
		return e.Session.ID
	case e.Run != nil:
		return e.Run.SessionID
	}
	return e.SessionID
}

// String describes the event for a failure's message.
func (e ViewerEvent) String() string {
	s := e.Typename + " " + e.Of()
	switch {
	case e.Session != nil:
		s += fmt.Sprintf(" %s unread=%v", e.Session.Status, e.Session.Unread)
	case e.Run != nil:
		s += " " + e.Run.Status
	}
	return s
}

// ViewerEvents reads a viewerEvents subscription.
type ViewerEvents struct {
	events *Events
	All    []ViewerEvent
	socket *Socket
	id     string
}

// Viewer subscribes to viewerEvents after after ("": from now on).
func (s *Socket) Viewer(after string) *ViewerEvents {
	vars := map[string]any{}
	if after != "" {
		vars["a"] = after
	}
	id, ch := s.Subscribe(ViewerQuery, vars)
	return &ViewerEvents{events: &Events{t: s.t, frames: ch}, socket: s, id: id}
}

// Stop ends the subscription, so that it no longer counts against the connection's
// limit of subscriptions.
func (v *ViewerEvents) Stop() { v.socket.Stop(v.id) }

// Err returns the errors the subscription ended with, if it ended.
func (v *ViewerEvents) Err() []GQLError { return v.events.Err }

// TryNext returns the next event, or false when none came within d or the subscription
// ended.
func (v *ViewerEvents) TryNext(d time.Duration) (ViewerEvent, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case f, ok := <-v.events.frames:
		if !ok || f.Complete || len(f.Errors) > 0 {
			v.events.Done = true
			v.events.Err = append(v.events.Err, f.Errors...)
			return ViewerEvent{}, false
		}
		var wrap struct{ ViewerEvents ViewerEvent }
		if err := json.Unmarshal(f.Data, &wrap); err != nil {
			v.events.t.Fatalf("decoding viewer event %s: %v", f.Data, err)
		}
		v.All = append(v.All, wrap.ViewerEvents)
		return wrap.ViewerEvents, true
	case <-timer.C:
		return ViewerEvent{}, false
	}
}

// Until reads events until one satisfies match, and returns it.
func (v *ViewerEvents) Until(what string, match func(ViewerEvent) bool) ViewerEvent {
	t := v.events.t
	t.Helper()
	deadline := time.Now().Add(Wait)
	for {
		ev, ok := v.TryNext(time.Until(deadline))
		if !ok {
			t.Fatalf("waiting for %s: none within %v (errors %+v); seen %s", what, Wait, v.Err(), Describe(v.All))
		}
		if match(ev) {
			return ev
		}
	}
}

// Describe lists events for a failure's message.
func Describe(evs []ViewerEvent) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = e.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Changed matches a SessionChanged of session id with status (any when "").
func Changed(id, status string) func(ViewerEvent) bool {
	return func(e ViewerEvent) bool {
		return e.Typename == "SessionChanged" && e.Session.ID == id && (status == "" || e.Session.Status == status)
	}
}

// Ended matches the RunEnded of run id.
func Ended(id string) func(ViewerEvent) bool {
	return func(e ViewerEvent) bool { return e.Typename == "RunEnded" && e.Run.ID == id }
}

// EventsCursor returns Viewer.eventsCursor.
func (c *Client) EventsCursor() string {
	c.T.Helper()
	var out struct{ Viewer struct{ EventsCursor string } }
	c.Must(`{ viewer { eventsCursor } }`, nil, &out)
	return out.Viewer.EventsCursor
}
