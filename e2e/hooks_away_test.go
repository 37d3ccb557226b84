package e2e

import (
	"encoding/json"
	"testing"
	"time"
)

// awayData is the data of a budget.reached or schedule.fired delivery.
type awayData struct {
	SessionID, RunID, Scope, Cursor          string
	ScheduleID, FireID, ScheduledAt, Outcome string
}

func awayBody(t *testing.T, d delivery) (string, awayData) {
	t.Helper()
	var b struct {
		Type string
		Data awayData
	}
	if err := json.Unmarshal(d.Body, &b); err != nil {
		t.Fatalf("body %s: %v", d.Body, err)
	}
	return b.Type, b.Data
}

// TestWebhooksTellBudgetsReachedAndSchedulesFired: a run that waits for its session's
// token budget sends budget.reached (its run, the cap's scope, the cursor of its wait),
// and a schedule's fire sends schedule.fired (the schedule, the fire, its instant, its
// outcome and the run it started), each once, signed, on every store.
func TestWebhooksTellBudgetsReachedAndSchedulesFired(t *testing.T) {
	eachOfAllStores(t, func(t *testing.T, store string) {
		a := hooksApp(t, store, nil)
		c := guest(t, a)
		rcv := newReceiver(t, nil)
		h := createWebhook(t, c, rcv.URL+"/hook", "budget.reached", "schedule.fired")

		// The demo spends a token per word: the first reply passes a cap of 3, so the
		// second run waits before its model call.
		sid := c.CreateSession(map[string]any{"tokenBudget": 3})
		c.Send(sid, "one two three four")
		waitIdle(t, c, sid)
		_, waiting := c.Send(sid, "five")
		got := rcv.until(t, "budget.reached", ofType(t, "budget.reached", 1))
		typ, data := awayBody(t, got[0])
		if typ != "budget.reached" || data.SessionID != sid || data.RunID != waiting || data.Scope != "session" || data.Cursor == "" {
			t.Errorf("budget.reached: %s; want session %s, run %s, scope session, a cursor", got[0].Body, sid, waiting)
		}
		if !verify(t, h.Secret, got[0]) {
			t.Errorf("budget.reached's signature does not verify")
		}

		var created struct{ CreateSchedule struct{ ID string } }
		c.Must(`mutation($s: ID!) { createSchedule(input: {content: "the report", sessionId: $s, cron: "@daily", overlap: ENQUEUE}) { id } }`,
			map[string]any{"s": sid}, &created)
		var now struct {
			RunScheduleNow struct {
				ID, Outcome, ScheduledAt string
				Run                      *struct{ ID string }
			}
		}
		c.Must(`mutation($id: ID!) { runScheduleNow(id: $id) { id outcome scheduledAt run { id } } }`,
			map[string]any{"id": created.CreateSchedule.ID}, &now)
		f := now.RunScheduleNow
		if f.Outcome != "STARTED" || f.Run == nil {
			t.Fatalf("runScheduleNow: %+v", f)
		}
		got = rcv.until(t, "schedule.fired", ofType(t, "schedule.fired", 1))
		var fired []awayData
		for _, d := range got {
			if typ, data := awayBody(t, d); typ == "schedule.fired" {
				fired = append(fired, data)
				if !verify(t, h.Secret, d) {
					t.Errorf("schedule.fired's signature does not verify")
				}
			}
		}
		at, err := time.Parse(time.RFC3339Nano, fired[0].ScheduledAt)
		want, _ := time.Parse(time.RFC3339Nano, f.ScheduledAt)
		if len(fired) != 1 || fired[0].ScheduleID != created.CreateSchedule.ID || fired[0].FireID != f.ID || fired[0].Outcome != "STARTED" ||
			fired[0].SessionID != sid || fired[0].RunID != f.Run.ID || err != nil || !at.Equal(want) {
			t.Errorf("schedule.fired: %+v; want one of fire %+v", fired, f)
		}
		// Each was made once: the webhook's log holds two deliveries, both delivered.
		st := webhookOf(t, c, h.ID)
		if len(st.Deliveries) != 2 {
			t.Errorf("deliveries: %+v; want two", st.Deliveries)
		}
	})
}
