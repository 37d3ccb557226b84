package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// Service is the AgentService: every operation of the API, for the user in the context
// (see WithUser). It is safe for concurrent use. Every change goes in through one door,
// exec (commands.go): a Command, one row of the table of operations; the rest of its
// methods read.
//
// Processes sharing a store: a store that is a SoleWriter lets the service trust what it
// holds in memory of a session (sole); a store with a Coordinator makes this process one
// of several replicas (peers). The two questions are apart: a store shared by processes
// that coordinate nothing gets no shortcut, and its commands are done again when a write
// finds that another process wrote first.
type Service struct {
	*core

	compactorQuit chan struct{}
	compactorDone chan struct{}
	// firerQuit ends the loop that fires schedules (fireLoop), which closes firerDone.
	firerQuit chan struct{}
	firerDone chan struct{}
}

// core is what the parts of the service share: the store and its one writer, the agents,
// the limits, the clock, the worker slots, the sessions held in memory, the peers, the
// counters. The Service, each session's state (sessionState) and the replicas' seam
// (peers) hold it; none of them holds the Service.
type core struct {
	store  Store
	agents *Agents
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	tracer trace.Tracer // nil: no spans
	sched  *scheduler
	writer *writer
	peers  peers
	sole   bool // the store is a SoleWriter: what memory holds of a session is current

	states registry // the sessions held in memory

	viewers viewerHub   // the viewer subscriptions open here
	hooks   *hookWorker // attempts webhook deliveries
	seal    *sealer     // seals webhook secrets

	models  map[string]bool // Config.Models
	runs    sync.WaitGroup  // runner goroutines
	closing chan struct{}   // closed when Close begins ending subscriptions
	closed  atomic.Bool
	subs    atomic.Int64
	stats   counters
	quota   quotas

	compactions chan Compaction
}

type counters struct {
	cmds     commandCounts
	chunks   atomic.Int64
	mu       sync.Mutex
	runsDone map[RunStatus]int64
	usage    map[string]Usage // by model: Config.Models and OtherModel
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
		core: &core{
			store: store, agents: agents, cfg: cfg, log: log,
			now:         func() time.Time { return time.Now().UTC() },
			sched:       newScheduler(cfg.Workers, cfg.RunsPerUser),
			states:      registry{byID: make(map[string]*sessionState)},
			closing:     make(chan struct{}),
			compactions: make(chan Compaction, 4096),
		},
		compactorQuit: make(chan struct{}),
		compactorDone: make(chan struct{}),
		firerQuit:     make(chan struct{}),
		firerDone:     make(chan struct{}),
	}
	if clock := cfg.Clock; clock != nil {
		s.now = func() time.Time { return clock().UTC() }
	}
	if cfg.Tracing != nil {
		s.tracer = cfg.Tracing.Tracer(tracerName)
	}
	s.stats.runsDone = make(map[RunStatus]int64)
	s.stats.usage = make(map[string]Usage)
	s.models = make(map[string]bool, len(cfg.Models))
	for _, m := range cfg.Models {
		s.models[m] = true
	}
	if c, ok := store.(Coordinator); ok {
		s.peers = newReplicas(s.core, s.handle, c, cfg)
	} else {
		s.peers = solo{s.core}
		w, ok := store.(SoleWriter)
		s.sole = ok && w.SoleWriter()
	}
	s.writer = newWriter(store, cfg.RoundCommands, cfg.RoundGap)
	seal, err := newSealer(ctx, store, cfg.WebhookSealKey)
	if err != nil {
		s.writer.stop()
		return nil, err
	}
	s.seal = seal
	s.hooks = newHookWorker(s.core)
	go s.compactor()
	if err := s.peers.start(ctx); err != nil {
		close(s.firerDone)
		s.stop()
		return nil, err
	}
	go s.fireLoop()
	go s.pruneViewer()
	s.hooks.start()
	return s, nil
}

// Agents returns the agents sessions can use, each with the tools it offers with the
// server's default settings and their policies there, for a session of the caller in ctx
// (a guest's sessions are not offered the tools that act on the server's machine).
func (s *Service) Agents(ctx context.Context) []AgentInfo {
	list := s.agents.List()
	for i := range list {
		set := guestSettings(ctx, Settings{Agent: list[i].Name, BusyPolicy: BusyInterrupt})
		tools := s.toolsOf(list[i].Name, set)
		for j := range tools {
			if !tools[j].NoPolicy {
				tools[j].Policy, _ = s.policyOf(tools[j], set)
			}
		}
		list[i].Tools = tools
	}
	return list
}

// Stats is a snapshot of the service's counters, for metrics.
type Stats struct {
	ChunksStreamed int64
	Subscriptions  int64
	RunsBusy       int
	RunsWaiting    int
	RunsFinished   map[RunStatus]int64
	// Usage is the tokens agents reported, by model: those of Config.Models, and
	// OtherModel for the rest.
	Usage map[string]Usage
	// Commands counts the commands that came in (exec), by operation, whatever became of
	// them; "unknown" counts those naming none.
	Commands map[string]int64
	// Writes is what the writer did: rounds, batches and the time spent in the store.
	Writes WriterStats
	// RunsOwned is the runs this replica runs, queued or waiting included; Takeovers
	// counts runs it took over from replicas that were gone.
	RunsOwned int
	Takeovers int64
	// BrokerReconnects counts the times the Cluster's connection came back after a loss,
	// and BusDropped the messages it dropped, by reason (see DropCounter).
	BrokerReconnects int64
	BusDropped       map[string]int64
}

// Sweep forgets what the service caches of users and sessions no longer active (their
// storage footprints, once stale) and gives back the room its maps grew to for a crowd
// that has left. Call it now and then; it is cheap when there is nothing to forget.
func (s *Service) Sweep() {
	s.quota.sweep(time.Now())
	s.states.shrink()
}

// ReleaseMemory asks the store to give back the memory its caches hold, when it is a
// MemoryReleaser (the SQLite store is). Call it when a crowd of users has gone: the
// caches are read again from the storage afterwards.
func (s *Service) ReleaseMemory(ctx context.Context) error {
	if r, ok := s.store.(MemoryReleaser); ok {
		return r.ReleaseMemory(ctx)
	}
	return nil
}

// Subscriptions returns how many subscriptions are open, without the rest of Stats.
func (s *Service) Subscriptions() int64 { return s.subs.Load() }

// Stats returns the current counters.
func (s *Service) Stats() Stats {
	busy, waiting := s.sched.stats()
	st := Stats{ChunksStreamed: s.stats.chunks.Load(), Subscriptions: s.subs.Load(), RunsBusy: busy, RunsWaiting: waiting,
		RunsFinished: map[RunStatus]int64{}, Usage: map[string]Usage{}, Writes: s.writer.stats()}
	s.peers.stats(&st)
	for _, ss := range s.liveStates() {
		ss.mu.Lock()
		if ss.active != nil {
			st.RunsOwned++
		}
		st.RunsOwned += len(ss.queue)
		ss.mu.Unlock()
	}
	st.Commands = map[string]int64{}
	s.stats.cmds.mu.Lock()
	for k, v := range s.stats.cmds.n {
		st.Commands[k] = v
	}
	s.stats.cmds.mu.Unlock()
	s.stats.mu.Lock()
	for k, v := range s.stats.runsDone {
		st.RunsFinished[k] = v
	}
	for k, v := range s.stats.usage {
		st.Usage[k] = v
	}
	s.stats.mu.Unlock()
	return st
}

func (s *core) countRun(status RunStatus) {
	s.stats.mu.Lock()
	s.stats.runsDone[status]++
	s.stats.mu.Unlock()
}

// Ready returns nil while the service accepts work and its store can be written.
func (s *Service) Ready(ctx context.Context) error {
	if s.closed.Load() {
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	if err := s.peers.ready(); err != nil {
		return err
	}
	return s.store.Ping(ctx)
}

func newID() string { return uuid.NewString() }

// checkID returns EINVALID for a string that is not an ID this server makes.
func checkID(what, id string) error {
	if len(id) != 36 {
		return Errorf(EINVALID, "%s is not a valid ID", what)
	}
	if _, err := uuid.Parse(id); err != nil {
		return Errorf(EINVALID, "%s is not a valid ID", what)
	}
	return nil
}

// user returns the caller; EUNAUTHORIZED when the context has none.
func user(ctx context.Context) (string, error) {
	u := UserFrom(ctx)
	if u == "" {
		return "", Errorf(EUNAUTHORIZED, "sign in first")
	}
	return u, nil
}

func (s *core) checkOpen() error {
	if s.closed.Load() {
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	return nil
}

// Close stops the service: no new work is accepted, running runs end INTERRUPTED with
// their partial replies kept, runs waiting for an answer stay waiting (and resume when
// answered after a restart), queued runs stay queued, and subscriptions end once they have
// delivered what was recorded (with ErrShutdown, so that clients reconnect). It waits up
// to StopTimeout for agents to return.
func (s *Service) Close() {
	if s.closed.Swap(true) {
		return
	}
	close(s.firerQuit)
	<-s.firerDone
	s.sched.close()
	for _, st := range s.liveStates() {
		st.mu.Lock()
		st.log.waitIdle()
		if ar := st.active; ar != nil {
			if ar.run.Status == RunRunning {
				t := st.beginLocked()
				ar.finishLocked(t, RunInterrupted, "")
				if err := t.commitLocked(context.Background()); err != nil {
					s.log.Warn("recording an interrupted run at shutdown; it is recovered at the next start", "session", st.id, "err", err)
				}
			}
			if !ar.sealed {
				ar.sealLocked() // leave it as it is stored
			}
			ar.stopTimersLocked() // what waits stays waiting: the next start arms it again
		}
		st.dropQueueLocked()
		st.mu.Unlock()
	}
	close(s.closing)
	s.peers.leave()
	for _, st := range s.liveStates() {
		st.mu.Lock()
		st.log.wake()
		st.mu.Unlock()
	}
	s.viewers.wakeAll()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.StopTimeout):
		s.log.Warn("agents did not return in time after being stopped")
	}
	s.stop()
}

// stop ends the writer and the compactor, once they have done what waits, and the
// webhook worker once its attempts under way are recorded.
func (s *Service) stop() {
	if s.hooks != nil {
		s.hooks.stop()
	}
	s.writer.stop()
	close(s.compactorQuit)
	<-s.compactorDone
}

// isCtxErr reports whether err is a context's cancellation.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
