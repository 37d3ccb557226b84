package storetest

import (
	"sync"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// threadTests check the AG-UI threads' bindings (Store.Thread, Store.BindThread).
var threadTests = []struct {
	name string
	fn   func(t *testing.T, s service.Store)
}{
	{"BindThread/binds once, per user; Thread reads it, ENOTFOUND when unbound", testBindThread},
	{"BindThread/of two concurrent calls one binds, both answer its session", testBindThreadRace},
	{"BindThread/a session's deletion removes its bindings", testBindThreadDelete},
}

func testBindThread(t *testing.T, s service.Store) {
	ctx := t.Context()
	_, err := s.Thread(ctx, "u1", "t1")
	wantCode(t, "an unbound thread", err, service.ENOTFOUND)
	// The session need not exist yet.
	if got, err := s.BindThread(ctx, "u1", "t1", "s1"); err != nil || got != "s1" {
		t.Fatalf("BindThread = %q, %v; want s1", got, err)
	}
	if got, err := s.BindThread(ctx, "u1", "t1", "s2"); err != nil || got != "s1" {
		t.Errorf("binding a bound thread again = %q, %v; want the first binding, s1", got, err)
	}
	if got, err := s.Thread(ctx, "u1", "t1"); err != nil || got != "s1" {
		t.Errorf("Thread = %q, %v; want s1", got, err)
	}
	// Another user's thread of the same name is another thread.
	_, err = s.Thread(ctx, "u2", "t1")
	wantCode(t, "another user's thread of the same name", err, service.ENOTFOUND)
	if got, err := s.BindThread(ctx, "u2", "t1", "s3"); err != nil || got != "s3" {
		t.Errorf("another user's BindThread = %q, %v; want s3", got, err)
	}
	if got, _ := s.Thread(ctx, "u1", "t1"); got != "s1" {
		t.Errorf("the first user's thread is now bound to %q", got)
	}
}

func testBindThreadRace(t *testing.T, s service.Store) {
	ctx := t.Context()
	const n = 8
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = s.BindThread(ctx, "u1", "t1", string(rune('a'+i))) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("concurrent BindThread answered %q (%v), another %q", got[i], errs[i], got[0])
		}
	}
	if bound, _ := s.Thread(ctx, "u1", "t1"); bound != got[0] {
		t.Errorf("Thread = %q, the calls answered %q", bound, got[0])
	}
}

func testBindThreadDelete(t *testing.T, s service.Store) {
	ctx := t.Context()
	create(t, s, newSession("s1", "u1", t0))
	create(t, s, newSession("s2", "u1", t0))
	for thread, session := range map[string]string{"t1": "s1", "t2": "s1", "t3": "s2"} {
		if _, err := s.BindThread(ctx, "u1", thread, session); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, s, &service.Batch{SessionID: "s1", Delete: true})
	for _, thread := range []string{"t1", "t2"} {
		_, err := s.Thread(ctx, "u1", thread)
		wantCode(t, "a thread of the deleted session", err, service.ENOTFOUND)
	}
	if got, err := s.Thread(ctx, "u1", "t3"); err != nil || got != "s2" {
		t.Errorf("another session's thread = %q, %v; want s2", got, err)
	}
}
