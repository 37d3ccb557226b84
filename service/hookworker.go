package service

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// hookWorker attempts webhook deliveries: one per process, whichever wrote them. It
// claims due deliveries from the store with a lease (so that two replicas never attempt
// one at once), sends each with the HookSender, WebhookWorkers at a time, and records
// how the attempt went: delivered, tried again after the next interval of
// WebhookRetrySchedule, or FAILED; 410 Gone and WebhookDisableAfter deliveries failed in
// a row disable the webhook. It looks for due deliveries when a write here made some
// (poke), and every WebhookPoll for the rest: retries that came due, and deliveries whose
// lease lapsed with the process that held it. An attempt under way when the service
// stops is not recorded: its lease lapses and it is attempted again (at least once).
type hookWorker struct {
	c     *core
	owner string // the leases' owner: this process
	wake  chan struct{}
	slots chan struct{} // one per attempt under way

	ctx     context.Context // the attempts'; cancelled at stop
	cancel  context.CancelFunc
	quit    chan struct{}
	done    chan struct{}
	running sync.WaitGroup
	started bool
}

func newHookWorker(c *core) *hookWorker {
	ctx, cancel := context.WithCancel(context.Background())
	owner := c.peers.id()
	if owner == "" {
		owner = newID()
	}
	return &hookWorker{c: c, owner: owner, wake: make(chan struct{}, 1), slots: make(chan struct{}, c.cfg.WebhookWorkers),
		ctx: ctx, cancel: cancel, quit: make(chan struct{}), done: make(chan struct{})}
}

// start starts the worker, when the server sends webhooks.
func (w *hookWorker) start() {
	if w.c.cfg.Hooks == nil {
		return
	}
	w.started = true
	go w.run()
}

// poke has the worker look for due deliveries now.
func (w *hookWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// stop ends the worker: attempts under way are cut short and left unrecorded.
func (w *hookWorker) stop() {
	w.cancel()
	if !w.started {
		return
	}
	close(w.quit)
	<-w.done
	w.running.Wait()
}

func (w *hookWorker) run() {
	defer close(w.done)
	t := time.NewTicker(w.c.cfg.WebhookPoll)
	defer t.Stop()
	for {
		w.claim()
		select {
		case <-w.wake:
		case <-t.C:
		case <-w.quit:
			return
		}
	}
}

// lease is how long an attempt keeps its delivery from the other processes.
func (w *hookWorker) lease() time.Duration { return w.c.cfg.WebhookTimeout + 10*time.Second }

// claim claims due deliveries while attempts can start, and starts them.
func (w *hookWorker) claim() {
	s := w.c
	for {
		free := cap(w.slots) - len(w.slots)
		if free == 0 || w.ctx.Err() != nil {
			return
		}
		now := s.now()
		ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
		ds, err := s.store.ClaimDeliveries(ctx, w.owner, now, now.Add(w.lease()), free)
		cancel()
		if err != nil {
			if w.ctx.Err() == nil {
				s.log.Warn("claiming webhook deliveries", "err", err)
			}
			return
		}
		for _, d := range ds {
			w.slots <- struct{}{}
			w.running.Add(1)
			go func() {
				defer func() { <-w.slots; w.running.Done(); w.poke() }()
				w.attempt(d)
			}()
		}
		if len(ds) < free {
			return
		}
	}
}

// attempt makes one attempt of d and records how it went.
func (w *hookWorker) attempt(d *Delivery) {
	s := w.c
	secrets, err := w.secrets(d.Webhook)
	now := s.now()
	a := &Attempt{DeliveryID: d.ID, At: now}
	if err != nil {
		a.Error = "the webhook's secret cannot be read: rotate it"
		s.log.Error("opening a webhook secret", "webhook", d.Webhook.ID, "err", err)
	} else {
		ctx, cancel := context.WithTimeout(w.ctx, s.cfg.WebhookTimeout)
		a.StatusCode, err = s.cfg.Hooks.Send(ctx, &HookRequest{URL: d.Webhook.URL, ID: d.EventID, At: now, Body: []byte(d.Payload), Secrets: secrets})
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		if w.ctx.Err() != nil {
			return // stopping: the lease lapses and another attempt is made
		}
		switch {
		case err == nil && a.StatusCode >= 200 && a.StatusCode < 300:
			a.Delivered = true
		case timedOut:
			a.Error = fmt.Sprintf("no answer within %s", s.cfg.WebhookTimeout)
		case err != nil:
			a.Error = err.Error()
		case a.StatusCode == http.StatusGone:
			a.Error = "the receiver answered 410 Gone"
			a.Disable = "the receiver answered 410 Gone: it wants no more deliveries"
		case a.StatusCode >= 300 && a.StatusCode < 400:
			a.Error = fmt.Sprintf("the receiver answered %d %s (redirects are not followed)", a.StatusCode, http.StatusText(a.StatusCode))
		default:
			a.Error = fmt.Sprintf("the receiver answered %d %s", a.StatusCode, http.StatusText(a.StatusCode))
		}
	}
	if !a.Delivered && a.Disable == "" {
		if k := d.Attempts; k < len(s.cfg.WebhookRetrySchedule) && !d.Once {
			next := now.Add(jittered(s.cfg.WebhookRetrySchedule[k]))
			a.Next = &next
		}
		a.DisableAfter = s.cfg.WebhookDisableAfter
		a.DisableReason = fmt.Sprintf("%d deliveries in a row failed; the last: %s", s.cfg.WebhookDisableAfter, a.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.FinishAttempt(ctx, w.owner, a); err != nil && ErrorCode(err) != ECONFLICT {
		s.log.Warn("recording a webhook attempt; it is attempted again once its lease lapses", "delivery", d.ID, "err", err)
	}
}

// secrets returns the whsec_ secrets a delivery to wh is signed with: its own, and the
// one a rotation replaced while it still signs.
func (w *hookWorker) secrets(wh *Webhook) ([]string, error) {
	s := w.c
	raw, err := s.seal.open(wh.ID, wh.Secret)
	if err != nil {
		return nil, err
	}
	out := []string{"whsec_" + base64.StdEncoding.EncodeToString(raw)}
	if wh.PreviousUntil != nil && wh.PreviousUntil.After(s.now()) && len(wh.PreviousSecret) > 0 {
		if prev, err := s.seal.open(wh.ID, wh.PreviousSecret); err == nil {
			out = append(out, "whsec_"+base64.StdEncoding.EncodeToString(prev))
		}
	}
	return out, nil
}

// jittered is d made up to 20% longer, at random, so that the retries of many deliveries
// that failed together do not come together.
func jittered(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
