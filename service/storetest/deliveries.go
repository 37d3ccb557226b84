package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// The deliveries of webhooks: claimed with leases, attempted, ended, redelivered, pruned.

// due makes n deliveries to w1 due at t0 and returns their IDs, newest first.
func due(t *testing.T, s service.Store, n int) []string {
	t.Helper()
	mustCreateWebhook(t, s, webhook("w1", "u1", t0, "run.completed"))
	sess := newSession("s1", "u1", t0)
	l := created(t, s, sess)
	for i := range n {
		r := newRun(fmt.Sprintf("r%d", i), "s1", service.RunCompleted, at(time.Second))
		l.tell("u1", sess, service.SessionRunning, service.SessionIdle, &service.Event{Type: service.EventRunStatusChanged, At: t0, Run: r})
	}
	return idsOf(deliveriesOf(t, s, "w1"), func(d *service.Delivery) string { return d.ID })
}

func testClaim(t *testing.T, s service.Store) {
	ids := due(t, s, 6)
	ctx := t.Context()
	if got, _ := s.ClaimDeliveries(ctx, "a", at(-time.Second), at(time.Minute), 10); len(got) != 0 {
		t.Errorf("claimed %d before they are due", len(got))
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for _, owner := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.ClaimDeliveries(context.Background(), owner, t0, at(time.Minute), 4)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, d := range got {
				if d.Webhook == nil || d.Webhook.ID != "w1" || string(d.Webhook.Secret) != "sealed w1" {
					t.Errorf("claimed without its webhook: %s", dump(d))
				}
				if o, ok := seen[d.ID]; ok {
					t.Errorf("%s claimed by %s and %s", d.ID, o, owner)
				}
				seen[d.ID] = owner
			}
		}()
	}
	wg.Wait()
	if len(seen) != len(ids) {
		t.Errorf("claimed %d of %d", len(seen), len(ids))
	}
	if got, _ := s.ClaimDeliveries(ctx, "d", at(30*time.Second), at(time.Minute), 10); len(got) != 0 {
		t.Errorf("claimed %d leased ones", len(got))
	}
	if got, _ := s.ClaimDeliveries(ctx, "d", at(2*time.Minute), at(3*time.Minute), 10); len(got) != len(ids) {
		t.Errorf("claimed %d once the leases lapsed, want %d", len(got), len(ids))
	}
	off := false
	_, _ = s.UpdateWebhook(ctx, "w1", service.WebhookChange{Enabled: &off})
	if got, _ := s.ClaimDeliveries(ctx, "e", at(time.Hour), at(2*time.Hour), 10); len(got) != 0 {
		t.Errorf("claimed %d of a disabled webhook", len(got))
	}
}

func testFinishAttempt(t *testing.T, s service.Store) {
	ids := due(t, s, 4)
	ctx := t.Context()
	claimed, _ := s.ClaimDeliveries(ctx, "a", t0, at(time.Minute), 10)
	if len(claimed) != 4 {
		t.Fatalf("claimed %d", len(claimed))
	}
	wantCode(t, "without the lease", s.FinishAttempt(ctx, "b", &service.Attempt{DeliveryID: ids[0], At: t0, Delivered: true}), service.ECONFLICT)
	next := at(5 * time.Second)
	must := func(a *service.Attempt) {
		t.Helper()
		if err := s.FinishAttempt(ctx, "a", a); err != nil {
			t.Fatal(err)
		}
	}
	must(&service.Attempt{DeliveryID: ids[0], At: t0, StatusCode: 500, Error: "500", Next: &next, DisableAfter: 2, DisableReason: "two"})
	d, _ := s.Delivery(ctx, ids[0])
	if d.Status != service.DeliveryPending || d.Attempts != 1 || d.LastStatusCode != 500 || d.LastError != "500" || !d.NextAttemptAt.Equal(next) {
		t.Errorf("retried = %s", dump(d))
	}
	must(&service.Attempt{DeliveryID: ids[1], At: t0, StatusCode: 204, Delivered: true})
	d, _ = s.Delivery(ctx, ids[1])
	if d.Status != service.DeliveryDelivered || d.DeliveredAt == nil || d.NextAttemptAt != nil || d.Attempts != 1 {
		t.Errorf("delivered = %s", dump(d))
	}
	must(&service.Attempt{DeliveryID: ids[2], At: t0, Error: "refused", DisableAfter: 2, DisableReason: "two in a row"})
	if w, _ := s.Webhook(ctx, "w1"); !w.Enabled || w.Failures != 1 {
		t.Errorf("after one failed: %s", dump(w))
	}
	must(&service.Attempt{DeliveryID: ids[3], At: t0, Error: "refused", DisableAfter: 2, DisableReason: "two in a row"})
	w, _ := s.Webhook(ctx, "w1")
	if w.Enabled || w.DisabledReason != "two in a row" || w.Failures != 2 {
		t.Errorf("after two failed in a row: %s", dump(w))
	}
	on := true
	w, _ = s.UpdateWebhook(ctx, "w1", service.WebhookChange{Enabled: &on})
	if !w.Enabled || w.DisabledReason != "" || w.Failures != 0 {
		t.Errorf("enabled again: %s", dump(w))
	}
	claimed, _ = s.ClaimDeliveries(ctx, "a", at(time.Minute), at(2*time.Minute), 10)
	if len(claimed) != 1 || claimed[0].ID != ids[0] {
		t.Fatalf("claimed %s, want the retry", dump(claimed))
	}
	must(&service.Attempt{DeliveryID: ids[0], At: at(time.Minute), StatusCode: 410, Error: "gone", Disable: "410 Gone"})
	w, _ = s.Webhook(ctx, "w1")
	d, _ = s.Delivery(ctx, ids[0])
	if w.Enabled || w.DisabledReason != "410 Gone" || d.Status != service.DeliveryFailed || d.Attempts != 2 {
		t.Errorf("after 410: %s %s", dump(w), dump(d))
	}
}

func testRedeliver(t *testing.T, s service.Store) {
	ids := due(t, s, 1)
	ctx := t.Context()
	_, _ = s.ClaimDeliveries(ctx, "a", t0, at(time.Minute), 10)
	_ = s.FinishAttempt(ctx, "a", &service.Attempt{DeliveryID: ids[0], At: t0, Error: "refused"})
	d, err := s.Redeliver(ctx, ids[0], at(time.Hour))
	if err != nil || d.Status != service.DeliveryPending || !d.Once || !d.NextAttemptAt.Equal(at(time.Hour)) {
		t.Fatalf("Redeliver = %s, %v", dump(d), err)
	}
	claimed, _ := s.ClaimDeliveries(ctx, "a", at(time.Hour), at(2*time.Hour), 10)
	if len(claimed) != 1 {
		t.Fatalf("claimed %d", len(claimed))
	}
	retry := at(2 * time.Hour)
	_ = s.FinishAttempt(ctx, "a", &service.Attempt{DeliveryID: ids[0], At: at(time.Hour), Error: "refused", Next: &retry})
	if d, _ := s.Delivery(ctx, ids[0]); d.Status != service.DeliveryFailed || d.Attempts != 2 || d.Once {
		t.Errorf("after its one more attempt = %s", dump(d))
	}
	_, err = s.Redeliver(ctx, "missing", t0)
	wantCode(t, "Redeliver(missing)", err, service.ENOTFOUND)
}

func testPruneDeliveries(t *testing.T, s service.Store) {
	ids := due(t, s, 2)
	ctx := t.Context()
	_, _ = s.ClaimDeliveries(ctx, "a", t0, at(time.Minute), 10)
	_ = s.FinishAttempt(ctx, "a", &service.Attempt{DeliveryID: ids[1], At: t0, Delivered: true})
	n, err := s.PruneDeliveries(ctx, at(time.Second))
	if err != nil || n != 1 {
		t.Errorf("PruneDeliveries = %d, %v; want 1", n, err)
	}
	if len(deliveriesOf(t, s, "w1")) != 1 {
		t.Errorf("the pending one went too")
	}
}
