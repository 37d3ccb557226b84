package postgres

import (
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
)

// tellings is what the batches of one round of writes tell their users: viewer events and
// webhook events, queued as two statements (see queue). (The sessions' unread flags are
// written with the rest of their rows: sessionChanges.)
type tellings struct {
	// The viewer events in the batches' order, with each one's place among its user's
	// events of the round (k, from 1); count is how many each user has.
	vUser    []string
	vK       []int64
	vAt      []int64
	vPayload []string
	count    map[string]int64
	// The webhook events.
	hUser, hID, hType, hBody []string
	hAt                      []int64
}

// add takes what batch p tells.
func (t *tellings) add(p *prep) {
	ch := &p.ch
	for i, e := range ch.Viewer {
		if t.count == nil {
			t.count = map[string]int64{}
		}
		t.count[e.UserID]++
		t.vUser, t.vK = append(t.vUser, e.UserID), append(t.vK, t.count[e.UserID])
		t.vAt, t.vPayload = append(t.vAt, dbTime(e.At)), append(t.vPayload, p.viewer[i])
	}
	for _, h := range ch.Hooks {
		t.hUser, t.hID, t.hType = append(t.hUser, h.UserID), append(t.hID, h.ID), append(t.hType, h.Type)
		t.hBody, t.hAt = append(t.hBody, h.Body), append(t.hAt, dbTime(h.At))
	}
}

// queue queues the statements that write what the round tells: the users' counters are
// moved on in user order (so that two transactions never wait for each other's in a
// circle), each holding its row lock to the commit, so that the next transaction of the
// same user numbers after this one's, once it committed.
func (t *tellings) queue(wb *pgx.Batch) {
	if len(t.vUser) > 0 {
		users := make([]string, 0, len(t.count))
		for u := range t.count {
			users = append(users, u)
		}
		slices.Sort(users)
		counts := make([]int64, len(users))
		for i, u := range users {
			counts[i] = t.count[u]
		}
		n := make([]int64, len(t.vUser))
		for i, u := range t.vUser {
			n[i] = t.count[u]
		}
		wb.Queue(qInsertViewerEvents, users, counts, t.vUser, t.vK, n, t.vAt, t.vPayload)
	}
	if len(t.hUser) > 0 {
		wb.Queue(qInsertDeliveries, t.hUser, t.hID, t.hType, t.hBody, t.hAt, string(service.DeliveryPending))
	}
}
