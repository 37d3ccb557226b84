package storetest

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

var shareTests = []struct {
	name string
	fn   func(t *testing.T, s service.Store)
}{
	{"ShareLink/written with its batch, found by hash and by ID, listed oldest first", testShareLinkRoundTrip},
	{"ShareLink/a batch that writes a link again keeps its views", testShareLinkViews},
	{"ShareLink/ENOTFOUND when missing; counting a missing link's view does nothing", testShareLinkMissing},
	{"ShareLink/goes with its session", testShareLinkDeleted},
}

func hashOf(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func newShareLink(id, sessionID, token string, createdAt time.Time) *service.ShareLink {
	return &service.ShareLink{ID: id, SessionID: sessionID, Hash: hashOf(token), CreatedAt: createdAt}
}

// shareEvent is the event that goes with a link's write.
func shareEvent(l *service.ShareLink) *service.Event {
	return &service.Event{Type: service.EventShareLinkCreated, At: t0, Key: l.ID}
}

func writeLink(t *testing.T, lg *log, l *service.ShareLink) {
	t.Helper()
	b := lg.batch(shareEvent(l))
	b.ShareLink = l
	mustAppend(t, lg.s, b)
	lg.last = b.Events[len(b.Events)-1].Seq
}

func utcShareLink(l *service.ShareLink, views int64) *service.ShareLink {
	c := *l
	c.CreatedAt = c.CreatedAt.UTC()
	utcPtrT(&c.ExpiresAt)
	utcPtrT(&c.RevokedAt)
	c.Views = views
	return &c
}

func utcPtrT(p **time.Time) {
	if *p != nil {
		u := (*p).UTC()
		*p = &u
	}
}

func testShareLinkRoundTrip(t *testing.T, s service.Store) {
	ctx := t.Context()
	lg := create(t, s, newSession("s1", "u1", t0))
	snap := newShareLink("l2", "s1", "snapshot", at(time.Second))
	snap.IncludeTools, snap.ExpiresAt = true, ptr(at(time.Hour))
	snap.Snapshot = &service.ShareSnapshot{Seq: 7, Leaf: "m3", Text: &service.FrozenText{ID: "m3", Runes: 12}, Run: "r1",
		Tools: []service.FrozenTool{{ID: "t1", Status: service.ToolRunning, Runes: 4}, {ID: "t2", Status: service.ToolCompleted}}}
	live := newShareLink("l1", "s1", "live", at(time.Second)) // the same time: by ID
	live.Live = true
	writeLink(t, lg, snap)
	writeLink(t, lg, live)

	got, err := s.ShareLink(ctx, hashOf("snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the link found by hash", got, utcShareLink(snap, 0))
	if got, err = s.ShareLinkByID(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the link found by ID", got, utcShareLink(live, 0))
	list, err := s.ShareLinks(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the session's links", idsOf(list, func(l *service.ShareLink) string { return l.ID }), []string{"l1", "l2"})
	if list, err = s.ShareLinks(ctx, "missing"); err != nil || len(list) != 0 {
		t.Errorf("links of a missing session: %v, %v", list, err)
	}
	evs, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Type != service.EventShareLinkCreated || evs[0].Key != "l2" {
		t.Errorf("the events that tell of the links: %s", dump(evs))
	}
}

func testShareLinkViews(t *testing.T, s service.Store) {
	ctx := t.Context()
	lg := create(t, s, newSession("s1", "u1", t0))
	l := newShareLink("l1", "s1", "tok", t0)
	writeLink(t, lg, l)
	for range 3 {
		if err := s.CountShareView(ctx, "l1"); err != nil {
			t.Fatal(err)
		}
	}
	revoked := *l
	revoked.RevokedAt = ptr(at(time.Minute))
	revoked.Views = 99 // a batch's views are not written
	b := lg.batch(&service.Event{Type: service.EventShareLinkRevoked, At: t0, Key: "l1"})
	b.ShareLink = &revoked
	mustAppend(t, s, b)
	got, err := s.ShareLinkByID(ctx, "l1")
	if err != nil {
		t.Fatal(err)
	}
	want := utcShareLink(&revoked, 3)
	wantEqual(t, "the revoked link", got, want)
}

func testShareLinkMissing(t *testing.T, s service.Store) {
	ctx := t.Context()
	_, err := s.ShareLink(ctx, hashOf("nothing"))
	wantCode(t, "a hash no link has", err, service.ENOTFOUND)
	_, err = s.ShareLinkByID(ctx, "missing")
	wantCode(t, "a missing ID", err, service.ENOTFOUND)
	if err := s.CountShareView(ctx, "missing"); err != nil {
		t.Errorf("counting a missing link's view: %v", err)
	}
}

func testShareLinkDeleted(t *testing.T, s service.Store) {
	ctx := t.Context()
	lg := create(t, s, newSession("s1", "u1", t0))
	writeLink(t, lg, newShareLink("l1", "s1", "tok", t0))
	lg2 := create(t, s, newSession("s2", "u1", t0))
	writeLink(t, lg2, newShareLink("l2", "s2", "other", t0))
	mustAppend(t, s, &service.Batch{SessionID: "s1", Delete: true})
	_, err := s.ShareLink(ctx, hashOf("tok"))
	wantCode(t, "a deleted session's link by hash", err, service.ENOTFOUND)
	_, err = s.ShareLinkByID(ctx, "l1")
	wantCode(t, "a deleted session's link by ID", err, service.ENOTFOUND)
	if _, err := s.ShareLink(ctx, hashOf("other")); err != nil {
		t.Errorf("another session's link went too: %v", err)
	}
}
