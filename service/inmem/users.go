package inmem

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/service"
)

// users is what the store keeps per user (service.UserStore): their viewer logs, their
// webhooks and the webhooks' deliveries. Its fields are guarded by the Store's mu.
type users struct {
	viewer     map[string][]viewerRow // by user, ascending Seq
	viewerSeq  map[string]int64
	webhooks   map[string]*service.Webhook
	deliveries map[string]*deliveryRow
}

// viewerRow is a viewer event as the store keeps it: encoded, so that nothing is shared.
type viewerRow struct {
	seq     int64
	at      time.Time
	payload []byte
}

// deliveryRow is a delivery with its lease.
type deliveryRow struct {
	d          service.Delivery
	leaseOwner string
	leaseUntil time.Time
}

func (u *users) init() {
	u.viewer = map[string][]viewerRow{}
	u.viewerSeq = map[string]int64{}
	u.webhooks = map[string]*service.Webhook{}
	u.deliveries = map[string]*deliveryRow{}
}

// tell writes what a batch tells its user (ch.Viewer, ch.Hooks); s.mu must be held.
func (s *Store) tell(ch *service.Changes) error {
	rows := make([]viewerRow, 0, len(ch.Viewer))
	for _, e := range ch.Viewer {
		p, err := e.Payload()
		if err != nil {
			return err
		}
		rows = append(rows, viewerRow{at: e.At.UTC(), payload: p})
	}
	for i, e := range ch.Viewer {
		s.u.viewerSeq[e.UserID]++
		rows[i].seq = s.u.viewerSeq[e.UserID]
		s.u.viewer[e.UserID] = append(s.u.viewer[e.UserID], rows[i])
	}
	for _, h := range ch.Hooks {
		s.deliver(h)
	}
	return nil
}

// deliver makes a delivery of h to each enabled webhook of its user that takes its type;
// s.mu must be held.
func (s *Store) deliver(h *service.HookEvent) {
	for _, w := range s.u.webhooks {
		if w.UserID != h.UserID || !w.Enabled || !slices.Contains(w.Events, h.Type) {
			continue
		}
		at := h.At.UTC()
		id := uuid.NewString()
		s.u.deliveries[id] = &deliveryRow{d: service.Delivery{ID: id, WebhookID: w.ID, UserID: w.UserID, EventID: h.ID,
			Type: h.Type, Payload: h.Body, Status: service.DeliveryPending, NextAttemptAt: &at, CreatedAt: at}}
	}
}

// ViewerEvents implements service.UserStore.
func (s *Store) ViewerEvents(ctx context.Context, userID string, afterSeq int64, limit int) ([]*service.ViewerEvent, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	log := s.u.viewer[userID]
	i, _ := slices.BinarySearchFunc(log, afterSeq+1, func(r viewerRow, seq int64) int { return cmp.Compare(r.seq, seq) })
	var out []*service.ViewerEvent
	for ; i < len(log) && (limit <= 0 || len(out) < limit); i++ {
		e, err := service.DecodeViewerEvent(userID, log[i].seq, log[i].payload)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// ViewerSeq implements service.UserStore.
func (s *Store) ViewerSeq(ctx context.Context, userID string) (int64, error) {
	if err := s.rlock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return s.u.viewerSeq[userID], nil
}

// PruneViewerEvents implements service.UserStore.
func (s *Store) PruneViewerEvents(ctx context.Context, before time.Time) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var n int64
	for user, log := range s.u.viewer {
		last := -1
		for i, r := range log[:max(len(log)-1, 0)] { // never the newest
			if r.at.Before(before) {
				last = i
			}
		}
		if last >= 0 {
			n += int64(last + 1)
			s.u.viewer[user] = slices.Clone(log[last+1:])
		}
	}
	return n, nil
}

// CreateWebhook implements service.UserStore.
func (s *Store) CreateWebhook(ctx context.Context, w *service.Webhook, limit int) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.u.webhooks {
		if o.UserID == w.UserID {
			n++
		}
	}
	if n >= limit {
		return service.Errorf(service.EINVALID, "you have %d webhooks, at most %d", n, limit)
	}
	s.u.webhooks[w.ID] = cloneWebhook(w)
	return nil
}

// Webhooks implements service.UserStore.
func (s *Store) Webhooks(ctx context.Context, userID string) ([]*service.Webhook, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var out []*service.Webhook
	for _, w := range s.u.webhooks {
		if w.UserID == userID {
			out = append(out, cloneWebhook(w))
		}
	}
	slices.SortFunc(out, func(a, b *service.Webhook) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Webhook implements service.UserStore.
func (s *Store) Webhook(ctx context.Context, id string) (*service.Webhook, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	w := s.u.webhooks[id]
	if w == nil {
		return nil, service.Errorf(service.ENOTFOUND, "webhook not found")
	}
	return cloneWebhook(w), nil
}

// UpdateWebhook implements service.UserStore.
func (s *Store) UpdateWebhook(ctx context.Context, id string, c service.WebhookChange) (*service.Webhook, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	w := s.u.webhooks[id]
	if w == nil {
		return nil, service.Errorf(service.ENOTFOUND, "webhook not found")
	}
	c.Apply(w)
	return cloneWebhook(w), nil
}

// DeleteWebhook implements service.UserStore.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.u.webhooks[id] == nil {
		return service.Errorf(service.ENOTFOUND, "webhook not found")
	}
	delete(s.u.webhooks, id)
	for did, r := range s.u.deliveries {
		if r.d.WebhookID == id {
			delete(s.u.deliveries, did)
		}
	}
	return nil
}

// Deliveries implements service.UserStore.
func (s *Store) Deliveries(ctx context.Context, webhookID string, after *service.DeliveryPosition, limit int) ([]*service.Delivery, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var out []*service.Delivery
	for _, r := range s.u.deliveries {
		if r.d.WebhookID != webhookID {
			continue
		}
		if after != nil && cmp.Or(r.d.CreatedAt.Compare(after.CreatedAt), strings.Compare(r.d.ID, after.ID)) >= 0 {
			continue
		}
		out = append(out, cloneDelivery(&r.d))
	}
	slices.SortFunc(out, func(a, b *service.Delivery) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Delivery implements service.UserStore.
func (s *Store) Delivery(ctx context.Context, id string) (*service.Delivery, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	r := s.u.deliveries[id]
	if r == nil {
		return nil, service.Errorf(service.ENOTFOUND, "delivery not found")
	}
	return cloneDelivery(&r.d), nil
}

// ClaimDeliveries implements service.UserStore.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]*service.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var due []*deliveryRow
	for _, r := range s.u.deliveries {
		w := s.u.webhooks[r.d.WebhookID]
		if r.d.Status != service.DeliveryPending || w == nil || !w.Enabled || r.d.NextAttemptAt == nil ||
			r.d.NextAttemptAt.After(now) || (r.leaseOwner != "" && !r.leaseUntil.Before(now)) {
			continue
		}
		due = append(due, r)
	}
	slices.SortFunc(due, func(a, b *deliveryRow) int {
		return cmp.Or(a.d.NextAttemptAt.Compare(*b.d.NextAttemptAt), strings.Compare(a.d.ID, b.d.ID))
	})
	if limit > 0 && len(due) > limit {
		due = due[:limit]
	}
	out := make([]*service.Delivery, 0, len(due))
	for _, r := range due {
		r.leaseOwner, r.leaseUntil = owner, until.UTC()
		d := cloneDelivery(&r.d)
		d.Webhook = cloneWebhook(s.u.webhooks[r.d.WebhookID])
		out = append(out, d)
	}
	return out, nil
}

// FinishAttempt implements service.UserStore.
func (s *Store) FinishAttempt(ctx context.Context, owner string, a *service.Attempt) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	r := s.u.deliveries[a.DeliveryID]
	if r == nil || r.leaseOwner != owner {
		return service.Errorf(service.ECONFLICT, "the delivery is not leased to %s", owner)
	}
	d := &r.d
	r.leaseOwner, r.leaseUntil = "", time.Time{}
	d.Attempts++
	d.LastStatusCode, d.LastError = a.StatusCode, a.Error
	w := s.u.webhooks[d.WebhookID]
	switch {
	case a.Delivered:
		at := a.At.UTC()
		d.Status, d.DeliveredAt, d.NextAttemptAt, d.Once = service.DeliveryDelivered, &at, nil, false
		if w != nil {
			w.Failures = 0
		}
	case a.Next != nil && !d.Once:
		next := a.Next.UTC()
		d.NextAttemptAt = &next
	default:
		d.Status, d.NextAttemptAt, d.Once = service.DeliveryFailed, nil, false
		if w != nil {
			w.Failures++
			if a.DisableAfter > 0 && w.Failures >= a.DisableAfter && w.Enabled {
				w.Enabled, w.DisabledReason = false, a.DisableReason
			}
		}
	}
	if a.Disable != "" && w != nil {
		w.Enabled, w.DisabledReason = false, a.Disable
	}
	return nil
}

// Redeliver implements service.UserStore.
func (s *Store) Redeliver(ctx context.Context, id string, at time.Time) (*service.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	r := s.u.deliveries[id]
	if r == nil {
		return nil, service.Errorf(service.ENOTFOUND, "delivery not found")
	}
	d := &r.d
	if d.Status != service.DeliveryPending {
		d.Status, d.Once = service.DeliveryPending, true
	}
	due := at.UTC()
	d.NextAttemptAt = &due
	return cloneDelivery(d), nil
}

// PruneDeliveries implements service.UserStore.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var n int64
	for id, r := range s.u.deliveries {
		if r.d.Status != service.DeliveryPending && r.d.CreatedAt.Before(before) {
			delete(s.u.deliveries, id)
			n++
		}
	}
	return n, nil
}

func cloneWebhook(w *service.Webhook) *service.Webhook {
	cp := *w
	cp.CreatedAt = cloneTime(w.CreatedAt)
	cp.Events = slices.Clone(w.Events)
	cp.Secret = slices.Clone(w.Secret)
	cp.PreviousSecret = slices.Clone(w.PreviousSecret)
	cp.PreviousUntil = cloneTimePtr(w.PreviousUntil)
	return &cp
}

func cloneDelivery(d *service.Delivery) *service.Delivery {
	cp := *d
	cp.CreatedAt = cloneTime(d.CreatedAt)
	cp.NextAttemptAt = cloneTimePtr(d.NextAttemptAt)
	cp.DeliveredAt = cloneTimePtr(d.DeliveredAt)
	cp.Webhook = nil
	return &cp
}
