package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Config holds the service's limits. Zero values take the defaults of DefaultConfig.
type Config struct {
	MaxMessageBytes  int           // a user message or answer; default 32 KiB
	MaxReplyBytes    int           // an assistant message; default 1 MiB
	MaxTitleLength   int           // code points; default 200
	MaxPageSize      int           // sessions or messages per page; default 100
	DefaultPageSize  int           // when first/last is not given; default 20
	Workers          int           // runs executing at once on this server; default 16
	RunsPerUser      int           // runs executing at once for one user; default 2
	MaxQueuedRuns    int           // runs waiting in one session (ENQUEUE); default 20
	FlushInterval    time.Duration // how long streamed text may wait before it is written; default 20ms
	TailEvents       int           // recent events per session kept in memory for subscribers; default 1024
	ReadBatch        int           // events a subscriber reads at once; default 256
	CompactScanLimit int           // events read to compact one finished message; default 100000
	MaxSubscriptions int           // open subscriptions on the server; default 100000
	StopTimeout      time.Duration // how long Close waits for agents to return; default 3s
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxMessageBytes:  32 << 10,
		MaxReplyBytes:    1 << 20,
		MaxTitleLength:   200,
		MaxPageSize:      100,
		DefaultPageSize:  20,
		Workers:          16,
		RunsPerUser:      2,
		MaxQueuedRuns:    20,
		FlushInterval:    20 * time.Millisecond,
		TailEvents:       1024,
		ReadBatch:        256,
		CompactScanLimit: 100000,
		MaxSubscriptions: 100000,
		StopTimeout:      3 * time.Second,
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&c.MaxMessageBytes, d.MaxMessageBytes)
	set(&c.MaxReplyBytes, d.MaxReplyBytes)
	set(&c.MaxTitleLength, d.MaxTitleLength)
	set(&c.MaxPageSize, d.MaxPageSize)
	set(&c.DefaultPageSize, d.DefaultPageSize)
	set(&c.Workers, d.Workers)
	set(&c.RunsPerUser, d.RunsPerUser)
	set(&c.MaxQueuedRuns, d.MaxQueuedRuns)
	set(&c.TailEvents, d.TailEvents)
	set(&c.ReadBatch, d.ReadBatch)
	set(&c.CompactScanLimit, d.CompactScanLimit)
	set(&c.MaxSubscriptions, d.MaxSubscriptions)
	if c.FlushInterval < 0 {
		c.FlushInterval = 0
	} else if c.FlushInterval == 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = d.StopTimeout
	}
}

// Service is the AgentService: every operation of the API, for the user in the context
// (see WithUser). It is safe for concurrent use.
type Service struct {
	store  Store
	agents *Agents
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	sched  *scheduler

	statesMu sync.Mutex
	states   map[string]*sessionState

	runs     sync.WaitGroup // runner goroutines
	subsDone sync.WaitGroup // subscription goroutines
	closing  chan struct{}
	closed   atomic.Bool
	// writeFailure is the last write that failed for want of storage.
	writeFailure atomic.Pointer[writeFailure]
	subs         atomic.Int64
	stats        counters
}

type counters struct {
	chunks   atomic.Int64
	runsMu   sync.Mutex
	runsDone map[RunStatus]int64
}

// New builds the service on store with the given agents, and recovers what a previous
// process left: runs that were RUNNING end INTERRUPTED with their partial replies kept,
// QUEUED runs start again, and WAITING_FOR_INPUT runs wait for their answer.
func New(ctx context.Context, store Store, agents *Agents, cfg Config, log *slog.Logger) (*Service, error) {
	cfg.fill()
	if log == nil {
		log = slog.Default()
	}
	s := &Service{
		store: store, agents: agents, cfg: cfg, log: log,
		now:     func() time.Time { return time.Now().UTC() },
		sched:   newScheduler(cfg.Workers, cfg.RunsPerUser),
		states:  make(map[string]*sessionState),
		closing: make(chan struct{}),
	}
	s.stats.runsDone = make(map[RunStatus]int64)
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Agents returns the registry of agents sessions can use.
func (s *Service) Agents() []AgentInfo { return s.agents.List() }

// Stats is a snapshot of the service's counters, for metrics.
type Stats struct {
	ChunksStreamed int64
	Subscriptions  int64
	RunsBusy       int
	RunsWaiting    int
	RunsFinished   map[RunStatus]int64
}

// Stats returns the current counters.
func (s *Service) Stats() Stats {
	busy, waiting := s.sched.stats()
	st := Stats{ChunksStreamed: s.stats.chunks.Load(), Subscriptions: s.subs.Load(), RunsBusy: busy, RunsWaiting: waiting, RunsFinished: map[RunStatus]int64{}}
	s.stats.runsMu.Lock()
	for k, v := range s.stats.runsDone {
		st.RunsFinished[k] = v
	}
	s.stats.runsMu.Unlock()
	return st
}

func (s *Service) countRun(status RunStatus) {
	s.stats.runsMu.Lock()
	s.stats.runsDone[status]++
	s.stats.runsMu.Unlock()
}

// Ready returns nil while the service accepts work and its store can be written: the store
// answers Ping, and no write has failed for want of storage in the last few seconds (a
// full disk can still take a tiny probe).
func (s *Service) Ready(ctx context.Context) error {
	if s.closed.Load() {
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	if f := s.writeFailure.Load(); f != nil && time.Since(f.at) < 5*time.Second {
		return f.err
	}
	return s.store.Ping(ctx)
}

// writeFailure is the last write that failed because storage could not be written.
type writeFailure struct {
	at  time.Time
	err error
}

// noteWrite records a store write that failed for want of storage, for Ready. Later
// successes do not clear it: on a full disk small writes can still pass while larger ones
// fail, and readiness should not flap with them.
func (s *Service) noteWrite(err error) {
	if ErrorCode(err) == EUNAVAILABLE {
		s.writeFailure.Store(&writeFailure{at: time.Now(), err: err})
	}
}

func newID() string { return uuid.NewString() }

func validID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

// user returns the caller; EUNAUTHORIZED when the context has none.
func user(ctx context.Context) (string, error) {
	u := UserFrom(ctx)
	if u == "" {
		return "", Errorf(EUNAUTHORIZED, "sign in first")
	}
	return u, nil
}

func (s *Service) checkOpen() error {
	if s.closed.Load() {
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	return nil
}

// session returns the caller's session; ENOTFOUND when missing or another user's.
func (s *Service) session(ctx context.Context, id string) (*TalkSession, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	if !validID(id) {
		return nil, Errorf(ENOTFOUND, "session not found")
	}
	sess, err := s.store.Session(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && sess.UserID != u) {
		return nil, Errorf(ENOTFOUND, "session not found")
	}
	return sess, err
}

// lockSession loads the caller's session and locks its state; the returned func unlocks
// and releases it. The session is read again under the lock, so it is current.
func (s *Service) lockSession(ctx context.Context, id string) (*TalkSession, *sessionState, func(), error) {
	sess, err := s.session(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	st := s.acquireState(ctx, sess)
	st.mu.Lock()
	unlock := func() { st.mu.Unlock(); s.releaseState(st) }
	if st.deleted {
		unlock()
		return nil, nil, nil, Errorf(ENOTFOUND, "session not found")
	}
	sess, err = s.store.Session(ctx, id)
	if err == nil {
		err = s.syncStateLocked(ctx, st, sess)
	}
	if err != nil {
		unlock()
		if ErrorCode(err) == ENOTFOUND {
			return nil, nil, nil, Errorf(ENOTFOUND, "session not found")
		}
		return nil, nil, nil, err
	}
	return sess, st, unlock, nil
}

// syncStateLocked catches a session state up with the stored log. A state is built from a
// session read just before it; when an older state was dropped in between, the read can
// be behind what that state wrote, and the log must continue from what is stored.
func (s *Service) syncStateLocked(ctx context.Context, st *sessionState, sess *TalkSession) error {
	if sess.LastSeq <= st.lastSeq {
		return nil
	}
	last, err := s.store.Events(ctx, st.id, sess.LastSeq-1, 1)
	if err != nil {
		return err
	}
	st.lastSeq, st.lastOff = sess.LastSeq, 0
	if len(last) == 1 {
		st.lastOff = CursorOf(last[0]).Off
	}
	st.tail, st.tailStart = nil, sess.LastSeq+1
	return nil
}

// CreateTalkSession creates a session for the caller. EINVALID for a title that is too
// long, an unknown agent or an invalid setting.
func (s *Service) CreateTalkSession(ctx context.Context, title string, settings SettingsInput) (*TalkSession, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	title = strings.TrimSpace(title)
	if err := s.checkTitle(title); err != nil {
		return nil, err
	}
	set := Settings{Agent: "demo", BusyPolicy: BusyInterrupt}
	if err := s.applySettings(&set, settings); err != nil {
		return nil, err
	}
	now := s.now()
	sess := &TalkSession{ID: newID(), UserID: u, Title: title, Settings: set, CreatedAt: now, UpdatedAt: now}
	b := &Batch{SessionID: sess.ID, Session: sess}
	err = s.store.Apply(ctx, b)
	s.noteWrite(err)
	if err != nil {
		return nil, err
	}
	return sess, nil
}

func (s *Service) checkTitle(title string) error {
	if !utf8.ValidString(title) {
		return Errorf(EINVALID, "title is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(title); n > s.cfg.MaxTitleLength {
		return Errorf(EINVALID, "title is too long: %d characters, at most %d", n, s.cfg.MaxTitleLength)
	}
	return nil
}

// SettingsInput changes settings; nil fields stay as they are. An empty Model or
// SystemPrompt clears it.
type SettingsInput struct {
	Agent        *string
	Model        *string
	SystemPrompt *string
	Temperature  *float64
	BusyPolicy   *BusyPolicy
}

func (s *Service) applySettings(set *Settings, in SettingsInput) error {
	if in.Agent != nil {
		if _, ok := s.agents.Get(*in.Agent); !ok {
			return Errorf(EINVALID, "unknown agent %q", truncate(*in.Agent, 40))
		}
		set.Agent = *in.Agent
	}
	if in.Model != nil {
		if len(*in.Model) > 200 {
			return Errorf(EINVALID, "model name is too long")
		}
		set.Model = emptyNil(*in.Model)
	}
	if in.SystemPrompt != nil {
		if len(*in.SystemPrompt) > s.cfg.MaxMessageBytes {
			return Errorf(EINVALID, "system prompt is too long: at most %d bytes", s.cfg.MaxMessageBytes)
		}
		set.SystemPrompt = emptyNil(*in.SystemPrompt)
	}
	if in.Temperature != nil {
		t := *in.Temperature
		if t < 0 || t > 2 || t != t {
			return Errorf(EINVALID, "temperature must be between 0 and 2")
		}
		set.Temperature = &t
	}
	if in.BusyPolicy != nil {
		if !in.BusyPolicy.Valid() {
			return Errorf(EINVALID, "unknown busy policy")
		}
		set.BusyPolicy = *in.BusyPolicy
	}
	return nil
}

func emptyNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// Sessions returns a page of the caller's sessions, most recent activity first, after the
// session-list cursor after (when not empty). first is clamped to the page size limit.
// EINVALID for a bad cursor or a negative first.
func (s *Service) Sessions(ctx context.Context, first *int, after string) (page []*SessionView, hasNext bool, err error) {
	u, err := user(ctx)
	if err != nil {
		return nil, false, err
	}
	n, err := s.pageSize(first)
	if err != nil {
		return nil, false, err
	}
	var pos *SessionPosition
	if after != "" {
		if pos, err = DecodeSessionCursor(after); err != nil {
			return nil, false, err
		}
	}
	list, err := s.store.Sessions(ctx, u, pos, n+1)
	if err != nil {
		return nil, false, err
	}
	if len(list) > n {
		list, hasNext = list[:n], true
	}
	for _, sess := range list {
		page = append(page, s.viewOf(ctx, sess))
	}
	return page, hasNext, nil
}

func (s *Service) pageSize(n *int) (int, error) {
	if n == nil {
		return s.cfg.DefaultPageSize, nil
	}
	if *n < 0 {
		return 0, Errorf(EINVALID, "page size must not be negative")
	}
	return min(*n, s.cfg.MaxPageSize), nil
}

// RenameTalkSession sets a session's title. ENOTFOUND, EINVALID as for create.
func (s *Service) RenameTalkSession(ctx context.Context, id, title string) (*TalkSession, error) {
	title = strings.TrimSpace(title)
	if err := s.checkTitle(title); err != nil {
		return nil, err
	}
	return s.updateSession(ctx, id, func(sess *TalkSession) error { sess.Title = title; return nil })
}

// UpdateSettings changes a session's settings; they apply to runs that start afterwards.
func (s *Service) UpdateSettings(ctx context.Context, id string, in SettingsInput) (*TalkSession, error) {
	return s.updateSession(ctx, id, func(sess *TalkSession) error { return s.applySettings(&sess.Settings, in) })
}

func (s *Service) updateSession(ctx context.Context, id string, change func(*TalkSession) error) (*TalkSession, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	sess, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := change(sess); err != nil {
		return nil, err
	}
	sess.UpdatedAt = s.now()
	snap := *sess
	b := &Batch{Session: sess, Events: []*Event{{Type: EventSessionUpdated, Session: &snap}}}
	if err := s.commitLocked(ctx, st, b); err != nil {
		return nil, err
	}
	return sess, nil
}

// DeleteTalkSession deletes a session and its history, stopping its run; subscriptions to
// it end. ENOTFOUND when missing or another user's.
func (s *Service) DeleteTalkSession(ctx context.Context, id string) error {
	_, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if ar := st.active; ar != nil {
		ar.sealed = true
		ar.stopTimer()
		ar.cancel()
		st.active = nil
		if ar.parked {
			ar.parked = false
			s.releaseState(st)
		}
	}
	st.queue = nil
	if err := s.store.Apply(ctx, &Batch{SessionID: id, Delete: true}); err != nil {
		return err
	}
	st.deleted = true
	close(st.notify)
	st.notify = make(chan struct{})
	return nil
}

// Close stops the service: no new work is accepted, running runs end INTERRUPTED with
// their partial replies kept, runs waiting for an answer stay waiting (and resume when
// answered after a restart), queued runs stay queued, subscriptions end. It waits up to
// StopTimeout for agents to return.
func (s *Service) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.sched.close()
	s.statesMu.Lock()
	states := make([]*sessionState, 0, len(s.states))
	for _, st := range s.states {
		states = append(states, st)
	}
	s.statesMu.Unlock()
	ctx := context.Background()
	for _, st := range states {
		st.mu.Lock()
		if ar := st.active; ar != nil {
			if ar.run.Status == RunWaitingForInput || ar.run.Status == RunQueued {
				ar.sealed = true // leave it as it is stored
				ar.cancel()
			} else {
				s.finishLocked(ctx, st, ar, RunInterrupted, "")
			}
		}
		st.queue = nil
		st.mu.Unlock()
	}
	// Subscriptions deliver what was just recorded, then end.
	close(s.closing)
	deadline := time.After(s.cfg.StopTimeout)
	for _, wg := range []*sync.WaitGroup{&s.subsDone, &s.runs} {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-deadline:
			s.log.Warn("agents or subscriptions did not end in time after being stopped")
			return
		}
	}
}

// isCtxErr reports whether err is a context's cancellation.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
