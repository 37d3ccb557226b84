package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// viewerQuery is the viewerEvents subscription of the viewer scenario: what a chat list
// reads (its sessions' status and unread flag, the runs that end).
const viewerQuery = `subscription { viewerEvents { __typename cursor ... on SessionChanged { session { id status unread updatedAt } } ... on RunEnded { run { id status } } } }`

// viewerConn is one user's viewerEvents subscription on a websocket of its own: it counts
// the runs it is told ended.
type viewerConn struct {
	c       *websocket.Conn
	wmu     sync.Mutex
	acked   chan struct{}
	done    chan struct{}
	closing atomic.Bool
	events  atomic.Int64
	ended   atomic.Int64  // RunEnded events
	told    chan struct{} // buffered(1): a run's end was told
	broken  atomic.Value  // string: why the subscription broke
}

// subscribeViewer opens a websocket with token and subscribes to viewerEvents from now.
func (c *client) subscribeViewer(ctx context.Context, token string) (*viewerConn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, _, err := c.dialer.DialContext(ctx, c.wsURL, nil)
	if err != nil {
		return nil, fmt.Errorf("websocket: %w", err)
	}
	v := &viewerConn{c: conn, acked: make(chan struct{}), done: make(chan struct{}), told: make(chan struct{}, 1)}
	go v.readLoop()
	init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + token}})
	if err := v.write(init); err != nil {
		v.abort()
		return nil, err
	}
	select {
	case <-v.acked:
	case <-v.done:
		return nil, errors.New("the connection ended before connection_ack")
	case <-ctx.Done():
		v.abort()
		return nil, fmt.Errorf("no connection_ack: %w", ctx.Err())
	}
	sub, _ := json.Marshal(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": viewerQuery}})
	if err := v.write(sub); err != nil {
		v.abort()
		return nil, err
	}
	return v, nil
}

func (v *viewerConn) write(b []byte) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	_ = v.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return v.c.WriteMessage(websocket.TextMessage, b)
}

func (v *viewerConn) readLoop() {
	defer close(v.done)
	for {
		_, b, err := v.c.ReadMessage()
		if err != nil {
			if !v.closing.Load() {
				v.broken.Store(err.Error())
			}
			return
		}
		var f struct {
			Type    string `json:"type"`
			Payload struct {
				Data *struct {
					ViewerEvents struct {
						Typename string `json:"__typename"`
					} `json:"viewerEvents"`
				} `json:"data"`
				Errors []struct{ Message string } `json:"errors"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			v.broken.Store(fmt.Sprintf("bad frame: %v", err))
			continue
		}
		switch f.Type {
		case "connection_ack":
			close(v.acked)
		case "ping":
			_ = v.write(pongFrame)
		case "next":
			if len(f.Payload.Errors) > 0 || f.Payload.Data == nil {
				v.broken.Store("error in next payload")
				continue
			}
			v.events.Add(1)
			if f.Payload.Data.ViewerEvents.Typename == "RunEnded" {
				v.ended.Add(1)
				select {
				case v.told <- struct{}{}:
				default:
				}
			}
		case "pong", "ka":
		default:
			if !v.closing.Load() {
				v.broken.Store("unexpected frame " + f.Type)
			}
		}
	}
}

func (v *viewerConn) close() {
	if v == nil {
		return
	}
	v.closing.Store(true)
	_ = v.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(5*time.Second))
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-v.done:
	case <-t.C:
	}
	_ = v.c.Close()
}

func (v *viewerConn) abort() {
	v.closing.Store(true)
	_ = v.c.Close()
}

// viewer: the paced scenario's sessions, each user with a viewerEvents subscription on a
// websocket of its own besides its session's stream. Reports the server's RSS and
// goroutines per viewer subscription (read as idle does, once steady), then sends one
// message per session as paced does: CPU per 1,000 words with the viewers on, and how
// many viewers were told of their run's end.
func (r *runner) viewer(ctx context.Context, n int) {
	const scen = "viewer"
	if !r.sc.enabled() {
		r.errs.add(scen, "needs -metrics", "viewer reads the server's RSS and goroutines from /metrics")
		return
	}
	f := r.setup(ctx, scen, n)
	defer r.teardown(ctx, f)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		return
	}
	r.closeIdleHTTP(f)
	base, _, _ := r.steady(ctx)
	views := make([]*viewerConn, len(f.sessions))
	defer forEach(context.WithoutCancel(ctx), len(views), max(r.cfg.Concurrency, 256), func(i int) { views[i].close() })
	forEach(ctx, len(f.sessions), r.cfg.Concurrency, func(i int) {
		s := f.sessions[i]
		v, err := s.sub.subscribeViewer(ctx, s.token)
		if err != nil {
			r.errs.add(scen, "setup: viewer subscription failed", err.Error())
			return
		}
		views[i] = v
	})
	r.closeIdleHTTP(f)
	k := 0
	for _, v := range views {
		if v != nil {
			k++
		}
	}
	if k == 0 {
		return
	}
	loaded, _, _ := r.steady(ctx)
	r.rep.add(scen, "viewer subscriptions", float64(k), "")
	r.rep.add(scen, "RSS per viewer subscription", (loaded.value(metricRSS)-base.value(metricRSS))/1024/float64(k), "KiB")
	r.rep.add(scen, "goroutines per viewer subscription", (loaded.value(metricGoroutines)-base.value(metricGoroutines))/float64(k), "")

	words := r.cfg.Words
	content, reply := demoMessage(words)
	ideal := time.Duration(float64(words) / r.cfg.Pace * float64(time.Second))
	m := r.startMeasure(ctx, scen)
	turns, _ := r.sendAll(ctx, f.sessions, content, r.expected(reply), 0, r.cfg.Ramp, false)
	res := r.waitAll(ctx, f.sessions, turns, ideal+r.cfg.Timeout)
	m.stop(ctx, r, scen)
	r.stopUnfinished(ctx, f.sessions, res)
	o := r.evaluate(f.sessions, res)
	// Each viewer is told of its user's run's end; by now it has, or soon.
	wait, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	told := 0
	for _, v := range views {
		if v == nil {
			continue
		}
		select {
		case <-v.told:
			told++
		case <-wait.Done():
		}
		if why, ok := v.broken.Load().(string); ok {
			r.errs.add(scen, "viewer subscription broke", why)
		}
	}
	if told < k {
		r.errs.add(scen, "viewers not told of their run's end", fmt.Sprintf("%d of %d told within %s", told, k, r.cfg.Timeout))
	}
	delivered := 0
	for _, s := range f.sessions {
		delivered += s.wordsDelivered()
	}
	r.rep.add(scen, "runs completed", float64(o.completed), "")
	r.rep.add(scen, "viewers told of their run's end", float64(told), "")
	r.rep.add(scen, "words delivered", float64(delivered), "")
	r.perKWords(scen, m, delivered)
	if o.completed > 0 {
		r.rep.add(scen, "time / ideal", o.lastEnd.Sub(o.firstSent).Seconds()/ideal.Seconds(), "x")
	}
	r.rep.latency(scen, "first chunk", summarize(o.firstChunk))
	r.addResources(scen, m)
}
