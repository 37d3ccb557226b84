package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runner runs scenarios against one server and collects their figures and errors.
type runner struct {
	cfg  config
	cls  []*client // one per -url
	sc   *scraper
	rep  *report
	errs *errorLog
	log  func(format string, a ...any)
}

// run runs one scenario by name.
func (r *runner) run(ctx context.Context, name string) {
	n := r.cfg.sessionsFor(name)
	r.log("%s: starting with %d sessions", name, n)
	start := time.Now()
	switch name {
	case "paced":
		r.paced(ctx, n)
	case "burst":
		r.burst(ctx, n)
	case "latency":
		r.latency(ctx, n)
	case "cancel":
		r.cancel(ctx, n)
	case "idle":
		r.idle(ctx, n)
	case "approval":
		r.approval(ctx, n)
	case "viewer":
		r.viewer(ctx, n)
	}
	r.log("%s: finished in %s with %d errors", name, time.Since(start).Round(time.Millisecond), r.errs.total(name))
}

// fleet is a scenario's sessions, all subscribed.
type fleet struct {
	scen     string
	sessions []*session
	baseSubs float64 // the server's active subscriptions before they were opened
	haveBase bool
	setup    time.Duration
}

// forEach calls fn(i) for every i in [0, n), at most limit at once, and returns when all
// calls have returned. Once ctx ends it starts no more.
func forEach(ctx context.Context, n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// setup creates n sessions, each of a new user, and subscribes each on its own websocket
// from the session's stream cursor, -concurrency at a time; then waits until the server
// counts the subscriptions as active. Sessions that fail are reported and left out.
func (r *runner) setup(ctx context.Context, scen string, n int) *fleet {
	f := &fleet{scen: scen}
	if r.sc.enabled() {
		if snap, err := r.sc.scrape(ctx); err == nil {
			f.baseSubs, f.haveBase = snap.sum(metricSubscriptions)
		}
	}
	start := time.Now()
	all := make([]*session, n)
	forEach(ctx, n, r.cfg.Concurrency, func(i int) {
		s := newSession(i, scen, r.errs)
		if scen == "approval" {
			s.query = approvalQuery
		}
		s.sub, s.cl = r.cls[i%len(r.cls)], r.cls[i%len(r.cls)]
		if r.cfg.Cross {
			s.cl = r.cls[(i+1)%len(r.cls)]
		}
		tok, err := s.cl.token(ctx)
		if err != nil {
			r.errs.add(scen, "setup: sign-in failed", err.Error())
			return
		}
		// Users that send messages do it on connections of their own; idle ones share the
		// pool, whose connections would otherwise count in the idle figures.
		s.token, s.http = tok, s.cl.http
		if scen != "idle" {
			s.http = s.cl.forUser()
		}
		s.id, s.cursor, err = s.cl.createSession(ctx, s.http, tok, fmt.Sprintf("load %s %d", scen, i), r.cfg.Agent)
		if err != nil {
			r.errs.add(scen, "setup: createTalkSession failed", err.Error())
			return
		}
		if s.conn, err = s.sub.subscribe(ctx, s); err != nil {
			r.errs.add(scen, "setup: subscription failed", fmt.Sprintf("session %s: %v", s.id, err))
			return
		}
		all[i] = s
	})
	for _, s := range all {
		if s != nil {
			f.sessions = append(f.sessions, s)
		}
	}
	f.setup = time.Since(start)
	r.log("%s: %d of %d sessions subscribed in %s", scen, len(f.sessions), n, f.setup.Round(time.Millisecond))
	if f.haveBase && len(f.sessions) > 0 {
		want := f.baseSubs + float64(len(f.sessions))
		got, ok := r.waitMetric(ctx, metricSubscriptions, r.cfg.Timeout, func(v float64) bool { return v >= want })
		if !ok && ctx.Err() == nil {
			r.errs.add(scen, "subscriptions not active on the server",
				fmt.Sprintf("the server counts %v active subscriptions after %s, want at least %v", got, r.cfg.Timeout, want))
		}
	}
	return f
}

// waitMetric re-reads the server's metric until cond holds of its value or the wait
// runs out; it answers the last value read and whether cond held.
func (r *runner) waitMetric(ctx context.Context, name string, wait time.Duration, cond func(float64) bool) (float64, bool) {
	deadline := time.Now().Add(wait)
	var last float64
	for {
		if snap, err := r.sc.scrape(ctx); err == nil {
			last = snap.value(name)
			if cond(last) {
				return last, true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, false
		}
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
}

// closeIdleHTTP closes the HTTP connections kept for reuse, the users' own included.
func (r *runner) closeIdleHTTP(f *fleet) {
	for _, cl := range r.cls {
		cl.http.CloseIdleConnections()
	}
	for _, s := range f.sessions {
		if s.http != nil {
			s.http.CloseIdleConnections()
		}
	}
}

// teardown closes every connection of the fleet and waits (up to -settle) for the
// server to count their subscriptions as gone, so the next scenario starts clean.
func (r *runner) teardown(ctx context.Context, f *fleet) {
	forEach(context.WithoutCancel(ctx), len(f.sessions), max(r.cfg.Concurrency, 256), func(i int) {
		f.sessions[i].conn.close()
	})
	r.closeIdleHTTP(f)
	if f.haveBase && ctx.Err() == nil {
		if v, ok := r.waitMetric(ctx, metricSubscriptions, r.cfg.Settle, func(v float64) bool { return v <= f.baseSubs }); !ok {
			r.log("%s: the server still counts %v active subscriptions after closing (%v before)", f.scen, v, f.baseSubs)
		}
	}
}

// demoMessage is a message the demo agent answers with a reply of words words
// ("You said: " and the message), and that reply.
func demoMessage(words int) (content, reply string) {
	var b strings.Builder
	for i := 1; i <= words-2; i++ {
		if i > 1 {
			b.WriteByte(' ')
		}
		b.WriteString("w" + strconv.Itoa(i))
	}
	return b.String(), "You said: " + b.String()
}

// expected is the reply to check for: only the demo agent's is known.
func (r *runner) expected(reply string) string {
	if r.cfg.Agent != "demo" {
		return ""
	}
	return reply
}

// send sends the turn's message to the session and answers how long addMessage took;
// a failure is reported and ends the turn.
func (r *runner) send(ctx context.Context, s *session, t *turn, content string) (time.Duration, bool) {
	s.markSent(t)
	start := time.Now()
	_, _, err := s.cl.addMessage(ctx, s.http, s.token, s.id, content)
	d := time.Since(start)
	if err != nil {
		r.errs.add(s.scen, "addMessage failed", fmt.Sprintf("session %s: %v", s.id, err))
		s.abandon(t, "addMessage failed")
		return d, false
	}
	return d, true
}

// sendAll begins a turn on every session and sends its message: spread over ramp and
// -concurrency at a time, or, with atOnce, all at the same instant. It returns the turns
// and the addMessage round trips that succeeded.
func (r *runner) sendAll(ctx context.Context, sessions []*session, content, expect string, chunkWait int, ramp time.Duration, atOnce bool) ([]*turn, []time.Duration) {
	n := len(sessions)
	turns := make([]*turn, n)
	for i, s := range sessions {
		turns[i] = s.begin(expect, chunkWait)
	}
	rtt := make([]time.Duration, n)
	ok := make([]bool, n)
	var wg sync.WaitGroup
	if atOnce {
		gate := make(chan struct{})
		for i, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				rtt[i], ok[i] = r.send(ctx, s, turns[i], content)
			}()
		}
		close(gate)
	} else {
		sem := make(chan struct{}, r.cfg.Concurrency)
		start := time.Now()
		for i, s := range sessions {
			if ramp > 0 {
				sleepUntil(ctx, start.Add(ramp*time.Duration(i)/time.Duration(n)))
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				s.abandon(turns[i], "not sent: interrupted")
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				rtt[i], ok[i] = r.send(ctx, s, turns[i], content)
			}()
		}
	}
	wg.Wait()
	var good []time.Duration
	for i := range rtt {
		if ok[i] {
			good = append(good, rtt[i])
		}
	}
	return turns, good
}

// waitAll waits for every turn to end, all within grace from now; a turn still going
// then is reported as a run that did not finish in time. It returns the turns' results.
func (r *runner) waitAll(ctx context.Context, sessions []*session, turns []*turn, grace time.Duration) []turnResult {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	if len(turns) > 1 {
		defer r.every(ctx, 10*time.Second, func() {
			done := 0
			for i, t := range turns {
				if sessions[i].result(t).Done {
					done++
				}
			}
			r.log("%s: %d of %d runs finished", sessions[0].scen, done, len(turns))
		})()
	}
	expired := false
	res := make([]turnResult, len(turns))
	for i, t := range turns {
		if !expired {
			select {
			case <-t.done:
			case <-timer.C:
				expired = true
			case <-ctx.Done():
				expired = true
			}
		}
		s := sessions[i]
		res[i] = s.result(t)
		if !res[i].Done && ctx.Err() == nil {
			r.errs.add(s.scen, "run did not finish in time",
				fmt.Sprintf("session %s: %d chunks seen, no final run status within %s", s.id, res[i].Chunks, grace.Round(time.Millisecond)))
		}
	}
	return res
}

// every calls fn every interval until the function it returns is called.
func (r *runner) every(ctx context.Context, interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// stopUnfinished presses stop on the sessions whose turn did not end, so their runs do
// not weigh on the next scenario.
func (r *runner) stopUnfinished(ctx context.Context, sessions []*session, res []turnResult) {
	var left []*session
	for i, x := range res {
		if !x.Done {
			left = append(left, sessions[i])
		}
	}
	if len(left) == 0 || ctx.Err() != nil {
		return
	}
	r.log("%s: stopping %d unfinished runs", left[0].scen, len(left))
	forEach(ctx, len(left), r.cfg.Concurrency, func(i int) {
		_, _, _ = left[i].cl.cancelRun(ctx, left[i].http, left[i].token, left[i].id)
	})
}

// outcome is what the results of turns that should complete add up to.
type outcome struct {
	completed  int
	running    []time.Duration // addMessage sent -> run RUNNING
	firstChunk []time.Duration // addMessage sent -> first chunk
	pause      []time.Duration // each reply's longest wait between two chunks
	reply      []time.Duration // addMessage sent -> reply and run done
	firstSent  time.Time
	lastEnd    time.Time
}

// evaluate checks that every ended turn completed and gathers the latencies. Turns that
// failed or timed out were reported already.
func (r *runner) evaluate(sessions []*session, res []turnResult) outcome {
	var o outcome
	for i, x := range res {
		if !x.Sent.IsZero() && (o.firstSent.IsZero() || x.Sent.Before(o.firstSent)) {
			o.firstSent = x.Sent
		}
		if !x.Done || x.Failed != "" {
			continue
		}
		s := sessions[i]
		if x.Status != "COMPLETED" {
			r.errs.add(s.scen, "run ended "+x.Status, fmt.Sprintf("session %s after %d chunks", s.id, x.Chunks))
			continue
		}
		o.completed++
		if !x.Running.IsZero() {
			o.running = append(o.running, x.Running.Sub(x.Sent))
		}
		if x.FirstChunk.IsZero() {
			r.errs.add(s.scen, "reply completed without chunks", "session "+s.id)
		} else {
			o.firstChunk = append(o.firstChunk, x.FirstChunk.Sub(x.Sent))
		}
		if x.Chunks > 1 {
			o.pause = append(o.pause, x.LongestPause)
		}
		e := x.End()
		o.reply = append(o.reply, e.Sub(x.Sent))
		if e.After(o.lastEnd) {
			o.lastEnd = e
		}
	}
	return o
}

// measure is the server's and the generator's resources around a scenario's busy part.
type measure struct {
	before, after snapshot
	ok            bool
	smp           *sampler
	peaks         peaks
	cpu0, cpu     time.Duration // the generator's own CPU
	db0, db       time.Duration // the database's CPU (with -db-pid)
	prof          *profiler
}

// startMeasure reads the server's metrics and starts the peak sampler.
func (r *runner) startMeasure(ctx context.Context, scen string) *measure {
	m := &measure{cpu0: processCPU(), prof: r.startProfiler(ctx, scen)}
	if r.cfg.DBPid > 0 {
		m.db0 = r.dbCPU(scen)
	}
	if r.sc.enabled() {
		snap, err := r.sc.scrape(ctx)
		if err != nil {
			r.errs.add(scen, "metrics unreadable", err.Error())
		} else {
			m.before, m.ok = snap, true
			m.smp = startSampler(ctx, r.sc, r.cfg.ScrapeInterval)
		}
	}
	return m
}

// stop reads the metrics again, -trail after the scenario's end so that the server's
// CPU includes what it does in the background for the scenario's replies (it folds
// finished replies' chunks a moment later), and stops the sampler.
func (m *measure) stop(ctx context.Context, r *runner, scen string) {
	m.cpu = processCPU() - m.cpu0
	defer m.prof.stop(r, scen)
	if !m.ok {
		return
	}
	if r.cfg.Trail > 0 {
		t := time.NewTimer(r.cfg.Trail)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	snap, err := r.sc.scrape(ctx)
	if err != nil {
		r.errs.add(scen, "metrics unreadable", err.Error())
		m.ok = false
		m.smp.finish(m.before)
		return
	}
	m.after = snap
	m.peaks = m.smp.finish(snap)
	if r.cfg.DBPid > 0 {
		m.db = r.dbCPU(scen) - m.db0
	}
}

// dbCPU is the database's CPU so far (see treeCPU), with an error reported for scen.
func (r *runner) dbCPU(scen string) time.Duration {
	d, err := treeCPU(r.cfg.DBPid)
	if err != nil {
		r.errs.add(scen, "database CPU unreadable", err.Error())
	}
	return d
}

// perKWords adds the server's CPU per 1,000 of the words delivered, and with -db-pid the
// database's and both together.
func (r *runner) perKWords(scen string, m *measure, delivered int) {
	if !m.ok || delivered == 0 {
		return
	}
	per := func(s float64) float64 { return s * 1e6 / float64(delivered) }
	r.rep.add(scen, "server CPU per 1,000 words", per(m.serverCPU()), "ms")
	if r.cfg.DBPid > 0 {
		r.rep.add(scen, "database CPU per 1,000 words", per(m.db.Seconds()), "ms")
		r.rep.add(scen, "server and database CPU per 1,000 words", per(m.serverCPU()+m.db.Seconds()), "ms")
	}
}

// serverCPU is the server's CPU seconds between the two readings.
func (m *measure) serverCPU() float64 {
	return m.after.value(metricCPU) - m.before.value(metricCPU)
}

// addResources adds the server's CPU and peaks, and the generator's CPU, to the report.
func (r *runner) addResources(scen string, m *measure) {
	if m.ok {
		r.rep.add(scen, "server CPU", m.serverCPU(), "s")
		if r.cfg.DBPid > 0 {
			r.rep.add(scen, "database CPU", m.db.Seconds(), "s")
		}
		if gc, ok := m.after.sum(metricGCCycles); ok {
			r.rep.add(scen, "server GC cycles", gc-m.before.value(metricGCCycles), "")
		}
		if m.peaks.Scrapes > 0 {
			r.rep.add(scen, "server peak RSS", m.peaks.RSS/(1<<20), "MiB")
			r.rep.add(scen, "server peak goroutines", m.peaks.Goroutines, "")
			r.rep.add(scen, "peak runs executing", m.peaks.RunsExecuting, "")
			r.rep.add(scen, "peak runs waiting for a worker", m.peaks.RunsWaiting, "")
			if m.peaks.RunsWaiting > 0 {
				r.log("%s: up to %v runs waited for a worker slot: the server runs at most WORKERS runs at once, so this scenario measured its queue too", scen, m.peaks.RunsWaiting)
			}
		}
	}
	r.rep.add(scen, "load generator CPU", m.cpu.Seconds(), "s")
}

// paced: one message per session at once (or over -ramp), replies of -words words;
// the time to deliver them all against the ideal, CPU per word, first-chunk latency.
func (r *runner) paced(ctx context.Context, n int) {
	const scen = "paced"
	f := r.setup(ctx, scen, n)
	defer r.teardown(ctx, f)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		return
	}
	words := r.cfg.Words
	content, reply := demoMessage(words)
	ideal := time.Duration(float64(words) / r.cfg.Pace * float64(time.Second))
	m := r.startMeasure(ctx, scen)
	turns, rtt := r.sendAll(ctx, f.sessions, content, r.expected(reply), 0, r.cfg.Ramp, false)
	res := r.waitAll(ctx, f.sessions, turns, ideal+r.cfg.Timeout)
	m.stop(ctx, r, scen)
	r.stopUnfinished(ctx, f.sessions, res)
	o := r.evaluate(f.sessions, res)

	delivered := 0
	for _, s := range f.sessions {
		delivered += s.wordsDelivered()
	}
	r.rep.add(scen, "sessions", float64(len(f.sessions)), "")
	r.rep.add(scen, "reply words", float64(words), "")
	r.rep.add(scen, "runs completed", float64(o.completed), "")
	if o.completed > 0 {
		total := o.lastEnd.Sub(o.firstSent)
		r.rep.add(scen, "first send -> last reply", total.Seconds(), "s")
		r.rep.add(scen, "ideal (words / pace)", ideal.Seconds(), "s")
		r.rep.add(scen, "time / ideal", total.Seconds()/ideal.Seconds(), "x")
	}
	r.rep.add(scen, "words delivered", float64(delivered), "")
	r.perKWords(scen, m, delivered)
	r.rep.latency(scen, "run RUNNING seen", summarize(o.running))
	r.rep.latency(scen, "first chunk", summarize(o.firstChunk))
	r.rep.latency(scen, "longest pause in a reply", summarize(o.pause))
	r.rep.latency(scen, "whole reply", summarize(o.reply))
	r.rep.latency(scen, "addMessage", summarize(rtt))
	r.addResources(scen, m)
}

// burst: one message per session, all sent at the same instant; first-chunk latency.
func (r *runner) burst(ctx context.Context, n int) {
	const scen = "burst"
	f := r.setup(ctx, scen, n)
	defer r.teardown(ctx, f)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		return
	}
	words := r.cfg.ShortWords
	content, reply := demoMessage(words)
	ideal := time.Duration(float64(words) / r.cfg.Pace * float64(time.Second))
	m := r.startMeasure(ctx, scen)
	turns, rtt := r.sendAll(ctx, f.sessions, content, r.expected(reply), 0, 0, true)
	res := r.waitAll(ctx, f.sessions, turns, ideal+r.cfg.Timeout)
	m.stop(ctx, r, scen)
	r.stopUnfinished(ctx, f.sessions, res)
	o := r.evaluate(f.sessions, res)

	r.rep.add(scen, "sessions", float64(len(f.sessions)), "")
	r.rep.add(scen, "reply words", float64(words), "")
	r.rep.add(scen, "runs completed", float64(o.completed), "")
	if o.completed > 0 {
		r.rep.add(scen, "first send -> last reply", o.lastEnd.Sub(o.firstSent).Seconds(), "s")
	}
	r.rep.latency(scen, "run RUNNING seen", summarize(o.running))
	r.rep.latency(scen, "first chunk", summarize(o.firstChunk))
	r.rep.latency(scen, "whole reply", summarize(o.reply))
	r.rep.latency(scen, "addMessage", summarize(rtt))
	r.addResources(scen, m)
}

// latency: many idle subscribed sessions; messages one at a time to random ones, each
// waiting for its reply; first-chunk latency of a quiet server.
func (r *runner) latency(ctx context.Context, n int) {
	const scen = "latency"
	f := r.setup(ctx, scen, n)
	defer r.teardown(ctx, f)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		return
	}
	words := r.cfg.ShortWords
	content, reply := demoMessage(words)
	expect := r.expected(reply)
	ideal := time.Duration(float64(words) / r.cfg.Pace * float64(time.Second))
	m := r.startMeasure(ctx, scen)
	var picked []*session
	var res []turnResult
	var rtt []time.Duration
	for range r.cfg.Samples {
		if ctx.Err() != nil {
			break
		}
		s := f.sessions[rand.IntN(len(f.sessions))]
		t := s.begin(expect, 0)
		if d, ok := r.send(ctx, s, t, content); ok {
			rtt = append(rtt, d)
		}
		one := r.waitAll(ctx, []*session{s}, []*turn{t}, ideal+r.cfg.Timeout)
		r.stopUnfinished(ctx, []*session{s}, one)
		picked = append(picked, s)
		res = append(res, one[0])
	}
	m.stop(ctx, r, scen)
	o := r.evaluate(picked, res)

	r.rep.add(scen, "idle sessions", float64(len(f.sessions)), "")
	r.rep.add(scen, "reply words", float64(words), "")
	r.rep.add(scen, "runs completed", float64(o.completed), "")
	r.rep.latency(scen, "first chunk", summarize(o.firstChunk))
	r.rep.latency(scen, "addMessage", summarize(rtt))
	r.addResources(scen, m)
}

// approval: idle subscribed sessions; one at a time, a random one gets "/approve", whose
// run waits for the decision on its call of the echo tool; once the subscriber has seen
// the request, decideToolCall approves it. The figure is decideToolCall sent -> the call's
// first output seen by the subscriber: the decision reached the waiting agent, which ran
// the tool (the demo's echo prints its first word at once), and its output came back.
func (r *runner) approval(ctx context.Context, n int) {
	const scen = "approval"
	f := r.setup(ctx, scen, n)
	defer r.teardown(ctx, f)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		return
	}
	const text = "approved and printed"
	expect := r.expected("The echo tool printed: " + text)
	ideal := time.Duration(float64(len(strings.Fields(text))+4) / r.cfg.Pace * float64(time.Second))
	m := r.startMeasure(ctx, scen)
	var picked []*session
	var res []turnResult
	var reached, decideRTT []time.Duration
	for range r.cfg.Samples {
		if ctx.Err() != nil {
			break
		}
		s := f.sessions[rand.IntN(len(f.sessions))]
		t := s.begin(expect, 0)
		if _, ok := r.send(ctx, s, t, "/approve "+text); !ok {
			continue
		}
		select {
		case <-t.asked:
		case <-t.done:
		case <-time.After(r.cfg.Timeout):
			r.errs.add(scen, "no approval requested in time", "session "+s.id)
		case <-ctx.Done():
		}
		x := s.result(t)
		if x.CallID != "" && !x.Done {
			sent := time.Now()
			err := s.cl.approve(ctx, s.http, s.token, x.CallID)
			decideRTT = append(decideRTT, time.Since(sent))
			if err != nil {
				r.errs.add(scen, "decideToolCall failed", fmt.Sprintf("session %s: %v", s.id, err))
			}
			one := r.waitAll(ctx, []*session{s}, []*turn{t}, ideal+r.cfg.Timeout)
			r.stopUnfinished(ctx, []*session{s}, one)
			if out := one[0].ToolOutput; !out.IsZero() {
				reached = append(reached, out.Sub(sent))
			} else if one[0].Failed == "" {
				r.errs.add(scen, "the approved call printed nothing", "session "+s.id)
			}
			picked, res = append(picked, s), append(res, one[0])
		}
	}
	m.stop(ctx, r, scen)
	o := r.evaluate(picked, res)

	r.rep.add(scen, "idle sessions", float64(len(f.sessions)), "")
	r.rep.add(scen, "runs completed", float64(o.completed), "")
	r.rep.latency(scen, "decideToolCall -> tool output seen", summarize(reached))
	r.rep.latency(scen, "decideToolCall", summarize(decideRTT))
	r.addResources(scen, m)
}

// slowChunks is how many chunks the runs of the cancel scenario would stream (100 ms
// apart) if nobody stopped them.
const slowChunks = 1000

// cancel: sessions streaming long replies; cancelRun on each once it has streamed a few
// chunks; cancelRun sent -> RunStatusChanged CANCELLED at the subscriber.
func (r *runner) cancel(ctx context.Context, n int) {
	const scen = "cancel"
	f := r.setup(ctx, scen, n)
	defer r.teardown(ctx, f)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		return
	}
	ss := f.sessions
	m := r.startMeasure(ctx, scen)
	turns, _ := r.sendAll(ctx, ss, "/slow "+strconv.Itoa(slowChunks), "", r.cfg.CancelAfter, 0, false)

	// Wait until each run has streamed -cancel-after chunks.
	ready := make([]bool, len(ss))
	timer := time.NewTimer(r.cfg.Timeout)
	expired := false
	for i, t := range turns {
		if !expired {
			select {
			case <-t.reached:
			case <-timer.C:
				expired = true
			case <-ctx.Done():
				expired = true
			}
		}
		x := ss[i].result(t)
		switch {
		case x.Failed != "":
		case x.Done:
			r.errs.add(scen, "run ended "+x.Status+" before it was cancelled", fmt.Sprintf("session %s after %d chunks", ss[i].id, x.Chunks))
		case x.Chunks >= r.cfg.CancelAfter:
			ready[i] = true
		case ctx.Err() == nil:
			r.errs.add(scen, "run did not stream in time", fmt.Sprintf("session %s: %d of %d chunks within %s", ss[i].id, x.Chunks, r.cfg.CancelAfter, r.cfg.Timeout))
		}
	}
	timer.Stop()

	// Press stop on each, spread over -cancel-spread; on the ones not ready too, so no
	// run is left streaming.
	sent := make([]time.Time, len(ss))
	rtt := make([]time.Duration, len(ss))
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range ss {
		if ctx.Err() != nil {
			break
		}
		sleepUntil(ctx, start.Add(r.cfg.CancelSpread*time.Duration(i)/time.Duration(len(ss))))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sent[i] = time.Now()
			_, status, err := s.cl.cancelRun(ctx, s.http, s.token, s.id)
			rtt[i] = time.Since(sent[i])
			switch {
			case !ready[i]:
			case err != nil:
				r.errs.add(scen, "cancelRun failed", fmt.Sprintf("session %s: %v", s.id, err))
			case status == "":
				r.errs.add(scen, "cancelRun answered null (nothing running)", "session "+s.id)
			case status != "CANCELLED":
				r.errs.add(scen, "cancelRun answered "+status, "session "+s.id)
			}
		}()
	}
	wg.Wait()
	res := r.waitAll(ctx, ss, turns, r.cfg.Timeout)
	m.stop(ctx, r, scen)

	var lat, cancelRTT []time.Duration
	for i, x := range res {
		if !ready[i] || !x.Done || x.Failed != "" {
			continue
		}
		cancelRTT = append(cancelRTT, rtt[i])
		if x.Status != "CANCELLED" {
			r.errs.add(scen, "run ended "+x.Status+" after cancelRun", fmt.Sprintf("session %s after %d chunks", ss[i].id, x.Chunks))
			continue
		}
		lat = append(lat, x.RunDone.Sub(sent[i]))
	}
	r.rep.add(scen, "sessions", float64(len(ss)), "")
	r.rep.add(scen, "runs cancelled", float64(len(lat)), "")
	r.rep.latency(scen, "cancelRun -> CANCELLED seen", summarize(lat))
	r.rep.latency(scen, "cancelRun", summarize(cancelRTT))
	r.addResources(scen, m)
}

// idle: many idle subscriptions, each with its own session, user and connection; the
// server's RSS and goroutines per subscription, and whether they come back once closed.
func (r *runner) idle(ctx context.Context, n int) {
	const scen = "idle"
	if !r.sc.enabled() {
		r.errs.add(scen, "needs -metrics", "idle reads the server's RSS and goroutines from /metrics")
		return
	}
	// Baseline: nothing of ours open on the server, pooled HTTP connections included.
	for _, cl := range r.cls {
		cl.http.CloseIdleConnections()
	}
	sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	base, err := r.sc.scrape(ctx)
	if err != nil {
		r.errs.add(scen, "metrics unreadable", err.Error())
		return
	}
	baseRSS, baseG := base.value(metricRSS), base.value(metricGoroutines)

	f := r.setup(ctx, scen, n)
	if len(f.sessions) == 0 || ctx.Err() != nil {
		r.teardown(ctx, f)
		return
	}
	r.closeIdleHTTP(f) // their server goroutines are not the subscriptions'
	k := float64(len(f.sessions))
	r.rep.add(scen, "subscriptions", k, "")
	r.rep.add(scen, "setup time", f.setup.Seconds(), "s")
	r.rep.add(scen, "subscriptions opened per second", k/f.setup.Seconds(), "")

	// Steady: RSS has not grown by more than 0.5% over two readings a second apart.
	loaded, steady, waited := r.steady(ctx)
	if !steady && ctx.Err() == nil {
		r.log("%s: RSS still growing after %s (-settle); reporting the last reading", scen, r.cfg.Settle)
	}
	rss, g := loaded.value(metricRSS), loaded.value(metricGoroutines)
	r.rep.add(scen, "baseline RSS", baseRSS/(1<<20), "MiB")
	r.rep.add(scen, "RSS with subscriptions", rss/(1<<20), "MiB")
	r.rep.add(scen, "RSS per subscription", (rss-baseRSS)/1024/k, "KiB")
	r.rep.add(scen, "baseline goroutines", baseG, "")
	r.rep.add(scen, "goroutines with subscriptions", g, "")
	r.rep.add(scen, "goroutines per subscription", (g-baseG)/k, "")
	r.rep.add(scen, "wait for steady RSS", waited.Seconds(), "s")

	// Close everything; the goroutines must come back to the baseline.
	closeStart := time.Now()
	forEach(context.WithoutCancel(ctx), len(f.sessions), max(r.cfg.Concurrency, 256), func(i int) {
		f.sessions[i].conn.close()
	})
	r.closeIdleHTTP(f)
	limit := baseG + float64(r.cfg.GoroutineSlack)
	gAfter, back := r.waitMetric(ctx, metricGoroutines, r.cfg.Settle, func(v float64) bool { return v <= limit })
	backIn := time.Since(closeStart)
	after, err := r.sc.scrape(ctx)
	if err != nil {
		r.errs.add(scen, "metrics unreadable", err.Error())
		return
	}
	rssAfter := after.value(metricRSS)
	if rss > baseRSS {
		// Memory comes back when the runtime returns it: wait (up to -settle) for most of
		// what the subscriptions added to go.
		relStart := time.Now()
		want := baseRSS + 0.2*(rss-baseRSS)
		v, ok := r.waitMetric(ctx, metricRSS, r.cfg.Settle, func(v float64) bool { return v <= want })
		if v > 0 {
			rssAfter = v
		}
		if ok {
			r.rep.add(scen, "time for RSS to come back", time.Since(relStart).Seconds()+backIn.Seconds(), "s")
		}
	}
	r.rep.add(scen, "goroutines after close", gAfter, "")
	r.rep.add(scen, "goroutines back to baseline (1 yes, 0 no)", b2f(back), "")
	if back {
		r.rep.add(scen, "time for goroutines to return", backIn.Seconds(), "s")
	} else if ctx.Err() == nil {
		r.errs.add(scen, "goroutines did not return to baseline",
			fmt.Sprintf("%v goroutines %s after closing, baseline %v (+%d allowed)", gAfter, r.cfg.Settle, baseG, r.cfg.GoroutineSlack))
	}
	r.rep.add(scen, "RSS after close", rssAfter/(1<<20), "MiB")
	if rss > baseRSS {
		r.rep.add(scen, "RSS released after close", 100*(rss-rssAfter)/(rss-baseRSS), "%")
	}
	r.rep.add(scen, "subscriptions active after close", after.value(metricSubscriptions), "")
}

// steady re-reads the metrics every second until RSS stops moving (ten readings in a row
// within 0.5% of the one before) or -settle runs out; it answers the last reading,
// whether it was steady and how long it waited.
func (r *runner) steady(ctx context.Context) (snapshot, bool, time.Duration) {
	// A server may collect and return memory a few seconds after a crowd of subscribers
	// arrived (talkgraph does, after 5 s): ten still readings in a row see that through.
	const steadyReadings = 10
	start := time.Now()
	deadline := start.Add(r.cfg.Settle)
	var last snapshot
	prev, calm := 0.0, 0
	for {
		snap, err := r.sc.scrape(ctx)
		if err == nil {
			last = snap
			rss := snap.value(metricRSS)
			if prev > 0 && rss <= prev*1.005 && rss >= prev*0.995 {
				calm++
			} else {
				calm = 0
			}
			prev = rss
			if calm >= steadyReadings {
				return last, true, time.Since(start)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, false, time.Since(start)
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
