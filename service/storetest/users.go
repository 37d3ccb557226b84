package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// userTests check service.UserStore: the viewer log and the webhooks' outbox that Append
// writes, and the rest of what a store keeps per user.
var userTests = []struct {
	name string
	fn   func(t *testing.T, s service.Store)
}{
	{"Append/writes what a batch tells, numbered per user from 1 with no gap", testViewerAppend},
	{"Append/a batch without a Mark, or of chunks alone, tells nothing", testViewerUntold},
	{"Append/a deletion tells SessionRemoved", testViewerDelete},
	{"Append/keeps the session's unread flag as Changes.Unread says", testUnread},
	{"Append/numbers one user's viewer events with no gap when sessions are written at once", testViewerConcurrent},
	{"Append/makes a delivery for each enabled webhook of the user that takes the type", testOutbox},
	{"PruneViewerEvents/deletes the start of each log, never a hole nor the newest; ViewerSeq stays", testPruneViewer},
	{"CreateWebhook/EINVALID at the limit, writing nothing", testWebhookLimit},
	{"Webhook/round-trips every field; ENOTFOUND when missing", testWebhookRoundTrip},
	{"UpdateWebhook/changes what it names; a new secret keeps the previous one", testWebhookUpdate},
	{"DeleteWebhook/deletes its deliveries; ENOTFOUND when missing", testWebhookDelete},
	{"Deliveries/newest first with keyset pagination", testDeliveriesPage},
	{"ClaimDeliveries/leases each due delivery to one claimer", testClaim},
	{"FinishAttempt/records the attempt, retries, ends and disables", testFinishAttempt},
	{"Redeliver/has an ended delivery attempted once more", testRedeliver},
	{"PruneDeliveries/deletes the ended ones made before", testPruneDeliveries},
}

// marked returns b marked as the service marks it: user u's, its row before, and its
// status before and after.
func marked(b *service.Batch, u string, row *service.TalkSession, before, after service.SessionStatus) *service.Batch {
	var cp *service.TalkSession
	if row != nil {
		c := *row
		cp = &c
	}
	b.Mark = &service.Mark{UserID: u, Row: cp, Before: before, After: after, At: at(time.Hour)}
	return b
}

// created creates sess with a Mark, so that it tells its user.
func created(t testing.TB, s service.Store, sess *service.TalkSession) *log {
	t.Helper()
	mustAppend(t, s, marked(&service.Batch{SessionID: sess.ID, Create: sess}, sess.UserID, sess, service.SessionIdle, service.SessionIdle))
	return &log{t: t, s: s, id: sess.ID}
}

// tell writes evs to l's session marked as the service would.
func (l *log) tell(u string, row *service.TalkSession, before, after service.SessionStatus, evs ...*service.Event) {
	l.t.Helper()
	mustAppend(l.t, l.s, marked(l.batch(evs...), u, row, before, after))
	l.last += int64(len(evs))
}

func viewerOf(t *testing.T, s service.Store, u string, after int64) []*service.ViewerEvent {
	t.Helper()
	evs, err := s.ViewerEvents(t.Context(), u, after, 0)
	if err != nil {
		t.Fatalf("ViewerEvents: %v", err)
	}
	return evs
}

func viewerSeqs(evs []*service.ViewerEvent) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func viewerTypes(evs []*service.ViewerEvent) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, string(e.Type)+" "+e.SessionID)
	}
	return out
}

func testViewerAppend(t *testing.T, s service.Store) {
	a, b := newSession("s1", "u1", t0), newSession("s2", "u1", t0)
	la := created(t, s, a)
	created(t, s, newSession("s3", "u2", t0))
	created(t, s, b)
	r := newRun("r1", "s1", service.RunRunning, at(time.Second))
	la.tell("u1", a, service.SessionIdle, service.SessionRunning, runChanged(r))
	done := *r
	done.Status = service.RunCompleted
	la.tell("u1", a, service.SessionRunning, service.SessionIdle, runChanged(&done))

	evs := viewerOf(t, s, "u1", 0)
	wantEqual(t, "u1's seqs", viewerSeqs(evs), []int64{1, 2, 3, 4, 5})
	wantEqual(t, "u1's events", viewerTypes(evs), []string{"SessionChanged s1", "SessionChanged s2", "SessionChanged s1", "RunEnded s1", "SessionChanged s1"})
	if e := evs[3]; e.UserID != "u1" || e.Run == nil || e.Run.Status != service.RunCompleted || e.SessionSeq != 2 {
		t.Errorf("RunEnded = %s", dump(e))
	}
	if e := evs[4]; e.Session == nil || e.Session.Title != a.Title || e.Status != service.SessionIdle || e.Session.LastSeq != 2 || e.At.Location() != time.UTC {
		t.Errorf("SessionChanged = %s", dump(e))
	}
	wantEqual(t, "u2's seqs", viewerSeqs(viewerOf(t, s, "u2", 0)), []int64{1})
	wantEqual(t, "after 3, up to 1", viewerSeqs(mustViewer(t, s, "u1", 3, 1)), []int64{4})
	if n, err := s.ViewerSeq(t.Context(), "u1"); err != nil || n != 5 {
		t.Errorf("ViewerSeq(u1) = %d, %v; want 5", n, err)
	}
	if n, err := s.ViewerSeq(t.Context(), "nobody"); err != nil || n != 0 {
		t.Errorf("ViewerSeq(nobody) = %d, %v; want 0", n, err)
	}
}

func mustViewer(t *testing.T, s service.Store, u string, after int64, limit int) []*service.ViewerEvent {
	t.Helper()
	evs, err := s.ViewerEvents(t.Context(), u, after, limit)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func testViewerUntold(t *testing.T, s service.Store) {
	sess := newSession("s1", "u1", t0)
	l := create(t, s, sess) // no Mark
	l.append(added(newMessage("m1", "s1")))
	l.tell("u1", sess, service.SessionRunning, service.SessionRunning, chunk("m1", "hello", 0), chunk("m1", " world", 5))
	wantEqual(t, "viewer events", viewerSeqs(viewerOf(t, s, "u1", 0)), []int64{})
}

func testViewerDelete(t *testing.T, s service.Store) {
	sess := newSession("s1", "u1", t0)
	created(t, s, sess)
	mustAppend(t, s, marked(&service.Batch{SessionID: "s1", Delete: true}, "u1", sess, service.SessionIdle, service.SessionIdle))
	evs := viewerOf(t, s, "u1", 0)
	wantEqual(t, "events", viewerTypes(evs), []string{"SessionChanged s1", "SessionRemoved s1"})
}

func testUnread(t *testing.T, s service.Store) {
	sess := newSession("s1", "u1", t0)
	l := create(t, s, sess)
	m := newMessage("m1", "s1")
	l.append(added(m), completed(m))
	got, err := s.Session(t.Context(), "s1")
	if err != nil || !got.Unread {
		t.Fatalf("after a completed reply: unread = %v, %v; want true", got.Unread, err)
	}
	if list, _ := s.Sessions(t.Context(), "u1", nil, 10); len(list) != 1 || !list[0].Unread {
		t.Errorf("Sessions: the session is not unread")
	}
	l.append(&service.Event{Type: service.EventSessionRead, At: at(time.Minute)})
	if got, _ := s.Session(t.Context(), "s1"); got.Unread {
		t.Errorf("after SessionRead: unread")
	}
	q := newQuestion("q1", "s1", "r1")
	l.append(asked(q))
	if got, _ := s.Session(t.Context(), "s1"); !got.Unread {
		t.Errorf("after a question: not unread")
	}
}

func testViewerConcurrent(t *testing.T, s service.Store) {
	const sessions, writes = 8, 10
	logs := make([]*log, sessions)
	rows := make([]*service.TalkSession, sessions)
	for i := range logs {
		rows[i] = newSession(fmt.Sprintf("s%d", i), "u1", t0)
		logs[i] = create(t, s, rows[i])
	}
	var wg sync.WaitGroup
	for i, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range writes {
				b := marked(l.batch(&service.Event{Type: service.EventSessionRead, At: at(time.Duration(j))}), "u1", rows[i], service.SessionIdle, service.SessionIdle)
				b.Mark.Row.Unread = true // each flips it: each tells
				if err := appendOne(s, b); err != nil {
					t.Error(err)
					return
				}
				l.last++
			}
		}()
	}
	wg.Wait()
	evs := viewerOf(t, s, "u1", 0)
	if len(evs) != sessions*writes {
		t.Fatalf("%d events, want %d", len(evs), sessions*writes)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has Seq %d", i, e.Seq)
		}
	}
}

// webhook returns a new webhook of u's taking events.
func webhook(id, u string, created time.Time, events ...string) *service.Webhook {
	return &service.Webhook{ID: id, UserID: u, URL: "https://example.com/" + id, Events: events, Enabled: true,
		Description: "hook " + id, CreatedAt: created, Secret: []byte("sealed " + id)}
}

func mustCreateWebhook(t *testing.T, s service.Store, w *service.Webhook) {
	t.Helper()
	if err := s.CreateWebhook(t.Context(), w, 10); err != nil {
		t.Fatal(err)
	}
}

// completeRun writes the end of a run of l's session, which tells run.completed.
func completeRun(l *log, u string, row *service.TalkSession, runID string) {
	r := newRun(runID, l.id, service.RunCompleted, at(time.Second))
	r.UserID = u
	l.tell(u, row, service.SessionRunning, service.SessionIdle, runChanged(r))
}

func deliveriesOf(t *testing.T, s service.Store, webhookID string) []*service.Delivery {
	t.Helper()
	ds, err := s.Deliveries(t.Context(), webhookID, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func testOutbox(t *testing.T, s service.Store) {
	mustCreateWebhook(t, s, webhook("w1", "u1", t0, "run.completed", "run.failed"))
	mustCreateWebhook(t, s, webhook("w2", "u1", t0, "input.requested"))
	mustCreateWebhook(t, s, webhook("w3", "u2", t0, "run.completed"))
	mustCreateWebhook(t, s, webhook("w4", "u1", t0, "run.completed"))
	off := false
	if _, err := s.UpdateWebhook(t.Context(), "w4", service.WebhookChange{Enabled: &off}); err != nil {
		t.Fatal(err)
	}
	sess := newSession("s1", "u1", t0)
	l := created(t, s, sess)
	completeRun(l, "u1", sess, "r1")
	ds := deliveriesOf(t, s, "w1")
	if len(ds) != 1 {
		t.Fatalf("w1 has %d deliveries, want 1", len(ds))
	}
	d := ds[0]
	if d.Type != "run.completed" || d.UserID != "u1" || d.Status != service.DeliveryPending || d.Attempts != 0 ||
		d.EventID == "" || d.NextAttemptAt == nil || d.Payload == "" || d.WebhookID != "w1" {
		t.Errorf("delivery = %s", dump(d))
	}
	for _, w := range []string{"w2", "w3", "w4"} {
		if n := len(deliveriesOf(t, s, w)); n != 0 {
			t.Errorf("%s has %d deliveries, want none", w, n)
		}
	}
	got, err := s.Delivery(t.Context(), d.ID)
	wantEqual(t, "Delivery", got, d)
	if err != nil {
		t.Error(err)
	}
	_, err = s.Delivery(t.Context(), "missing")
	wantCode(t, "Delivery(missing)", err, service.ENOTFOUND)
}

func testPruneViewer(t *testing.T, s service.Store) {
	sess := newSession("s1", "u1", t0)
	l := created(t, s, sess) // At t0 (its creation)
	row := *sess
	for i := 1; i <= 3; i++ {
		row.Unread = true
		l.tell("u1", &row, service.SessionIdle, service.SessionIdle, &service.Event{Type: service.EventSessionRead, At: at(time.Duration(i) * time.Hour)})
	}
	// Events at t0, t0+1h, t0+2h, t0+3h: before t0+2h30 go the first three.
	n, err := s.PruneViewerEvents(t.Context(), at(150*time.Minute))
	if err != nil || n != 3 {
		t.Errorf("PruneViewerEvents = %d, %v; want 3", n, err)
	}
	wantEqual(t, "kept", viewerSeqs(viewerOf(t, s, "u1", 0)), []int64{4})
	if seq, _ := s.ViewerSeq(t.Context(), "u1"); seq != 4 {
		t.Errorf("ViewerSeq = %d, want 4", seq)
	}
	// The newest stays whatever its age, so that a reader behind finds the gap.
	if n, _ := s.PruneViewerEvents(t.Context(), at(10*time.Hour)); n != 0 {
		t.Errorf("pruning everything deleted %d, want 0 (a user's newest stays)", n)
	}
	wantEqual(t, "kept after pruning everything", viewerSeqs(viewerOf(t, s, "u1", 0)), []int64{4})
	if seq, _ := s.ViewerSeq(t.Context(), "u1"); seq != 4 {
		t.Errorf("ViewerSeq after pruning everything = %d, want 4", seq)
	}
	l.tell("u1", &row, service.SessionIdle, service.SessionIdle, &service.Event{Type: service.EventSessionRead, At: at(11 * time.Hour)})
	wantEqual(t, "numbering goes on after pruning", viewerSeqs(viewerOf(t, s, "u1", 3)), []int64{4, 5})
}

func testWebhookLimit(t *testing.T, s service.Store) {
	for i := range 2 {
		if err := s.CreateWebhook(t.Context(), webhook(fmt.Sprintf("w%d", i), "u1", t0, "run.completed"), 2); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, "the third", s.CreateWebhook(t.Context(), webhook("w9", "u1", t0, "run.completed"), 2), service.EINVALID)
	if err := s.CreateWebhook(t.Context(), webhook("w8", "u2", t0, "run.completed"), 2); err != nil {
		t.Errorf("another user's first: %v", err)
	}
	list, _ := s.Webhooks(t.Context(), "u1")
	if len(list) != 2 {
		t.Errorf("u1 has %d webhooks, want 2", len(list))
	}
}

func testWebhookRoundTrip(t *testing.T, s service.Store) {
	w := webhook("w1", "u1", t0, "run.completed", "input.requested")
	mustCreateWebhook(t, s, w)
	mustCreateWebhook(t, s, webhook("w0", "u1", at(time.Second), "run.failed"))
	got, err := s.Webhook(t.Context(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	want := *w
	want.CreatedAt = t0.UTC()
	wantEqual(t, "Webhook", got, &want)
	_, err = s.Webhook(t.Context(), "missing")
	wantCode(t, "Webhook(missing)", err, service.ENOTFOUND)
	list, _ := s.Webhooks(t.Context(), "u1")
	wantEqual(t, "Webhooks, oldest first", idsOf(list, func(w *service.Webhook) string { return w.ID }), []string{"w1", "w0"})
}

func testWebhookUpdate(t *testing.T, s service.Store) {
	mustCreateWebhook(t, s, webhook("w1", "u1", t0, "run.completed"))
	u, d := "https://example.org/new", ""
	got, err := s.UpdateWebhook(t.Context(), "w1", service.WebhookChange{URL: &u, Events: []string{"run.failed"}, Description: &d})
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != u || len(got.Events) != 1 || got.Events[0] != "run.failed" || got.Description != "" || !got.Enabled {
		t.Errorf("updated = %s", dump(got))
	}
	got, _ = s.UpdateWebhook(t.Context(), "w1", service.WebhookChange{Secret: []byte("new"), PreviousUntil: at(time.Hour)})
	if string(got.Secret) != "new" || string(got.PreviousSecret) != "sealed w1" || got.PreviousUntil == nil || !got.PreviousUntil.Equal(at(time.Hour)) {
		t.Errorf("rotated = %s", dump(got))
	}
	_, err = s.UpdateWebhook(t.Context(), "missing", service.WebhookChange{})
	wantCode(t, "UpdateWebhook(missing)", err, service.ENOTFOUND)
}

func testWebhookDelete(t *testing.T, s service.Store) {
	mustCreateWebhook(t, s, webhook("w1", "u1", t0, "run.completed"))
	sess := newSession("s1", "u1", t0)
	completeRun(created(t, s, sess), "u1", sess, "r1")
	d := deliveriesOf(t, s, "w1")[0]
	if err := s.DeleteWebhook(t.Context(), "w1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Delivery(t.Context(), d.ID)
	wantCode(t, "its delivery", err, service.ENOTFOUND)
	wantCode(t, "again", s.DeleteWebhook(t.Context(), "w1"), service.ENOTFOUND)
}

func testDeliveriesPage(t *testing.T, s service.Store) {
	mustCreateWebhook(t, s, webhook("w1", "u1", t0, "run.completed"))
	sess := newSession("s1", "u1", t0)
	l := created(t, s, sess)
	for i := range 3 {
		r := newRun(fmt.Sprintf("r%d", i), "s1", service.RunCompleted, at(time.Second))
		l.tell("u1", sess, service.SessionRunning, service.SessionIdle, &service.Event{Type: service.EventRunStatusChanged, At: at(time.Duration(i) * time.Minute), Run: r})
	}
	all := deliveriesOf(t, s, "w1")
	if len(all) != 3 || !all[0].CreatedAt.After(all[2].CreatedAt) {
		t.Fatalf("deliveries = %s", dump(all))
	}
	page, err := s.Deliveries(t.Context(), "w1", &service.DeliveryPosition{CreatedAt: all[0].CreatedAt, ID: all[0].ID}, 1)
	if err != nil || len(page) != 1 || page[0].ID != all[1].ID {
		t.Errorf("the page after the newest = %s, %v", dump(page), err)
	}
}
