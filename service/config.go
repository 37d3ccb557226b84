package service

import (
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Config holds the service's limits. A zero field takes its value from DefaultConfig,
// which is the one place the defaults are written; FlushInterval alone means something at
// zero (see it), and takes the default when negative.
type Config struct {
	MaxMessageBytes int // a user message, an answer or a system prompt
	MaxReplyBytes   int // an assistant message or a tool's output
	MaxTitleLength  int // a session's title, in code points
	MaxPageSize     int // sessions or messages per page
	DefaultPageSize int // when first/last is not given
	Workers         int // runs executing at once on this server
	RunsPerUser     int // runs executing at once for one user
	MaxQueuedRuns   int // runs waiting in one session (busy policy ENQUEUE)
	// MaxSessionMessages bounds the messages of one session, on every branch;
	// MaxBranches the versions of one message (its siblings, itself included), which
	// edits and regenerations add; MaxForkMessages the messages a fork copies.
	MaxSessionMessages int
	MaxBranches        int
	MaxForkMessages    int
	// MaxShareLinks bounds the share links of one session that are neither revoked nor
	// expired.
	MaxShareLinks int
	// MaxSessionsPerUser and MaxUserBytes bound what one user keeps: sessions, and what
	// they wrote and set in them (see Derive's Bytes).
	MaxSessionsPerUser int
	MaxUserBytes       int64
	// FlushInterval is the least time between two writes of one run's streamed text; a
	// run's first goes at once. Zero writes it as soon as the writer is free.
	FlushInterval time.Duration
	// RoundCommands is how many commands one round of the writer takes at most; more
	// wait for the next round, which begins once this one is written.
	RoundCommands int
	// RoundGap is the least time from one write round's start to the next's when only
	// timed streamed text waits: the text of the sessions that come due meanwhile joins
	// one transaction instead of one each. Commands, and text that goes at once (a run's
	// first), never wait for it. Zero starts a round as soon as the last one is written.
	RoundGap time.Duration
	// TailEvents is how many recent events of a session stay in memory for its
	// subscribers; those further behind read the store.
	TailEvents int
	// ReadBatch is how many events a subscriber reads at once.
	ReadBatch int
	// MaxSubscriptions is how many subscriptions the server holds open at once.
	MaxSubscriptions int
	// StopTimeout is how long Close waits for agents to return.
	StopTimeout time.Duration
	// WriteRetry is how long a run's streamed text may keep failing to be written (the
	// storage is full or unreachable) before the agent is told and the run fails.
	WriteRetry time.Duration
	// CompactAfter is how long the replies that finish are gathered before their chunk
	// events are folded, all in one go (see Store.Compact).
	CompactAfter time.Duration
	// InputExpiry is how long a question or a call awaiting approval waits at most; an
	// agent may ask for less.
	InputExpiry time.Duration
	// ToolPolicies are the operator's policies by tool name, or by a pattern "prefix*"
	// for every tool whose name begins so: the loosest a session may set (see
	// policies.go). A tool it does not name keeps its own default (the shell's ASK).
	ToolPolicies map[string]ToolPolicy
	// GuestHostTools offers guests' sessions the tools that act on the server's machine
	// (ToolInfo.Host: the shell); by default they are not offered to guests.
	GuestHostTools bool

	// ViewerRetention is how long a user's viewer events are kept; a cursor from before
	// the oldest kept is refused (ECURSOREXPIRED). DeliveryRetention is how long a webhook
	// delivery that ended stays in its webhook's log.
	ViewerRetention   time.Duration
	DeliveryRetention time.Duration
	// Webhooks: MaxWebhooksPerUser bounds a user's webhooks; an attempt waits
	// WebhookTimeout at most for its answer; a delivery that failed is tried again after
	// each interval of WebhookRetrySchedule in turn (up to 20% longer), then ends FAILED;
	// WebhookDisableAfter deliveries failed in a row disable the webhook. WebhookWorkers
	// attempts run at once in this process, which looks for due deliveries (retries,
	// those another process left) every WebhookPoll. Hooks sends them (package webhook);
	// nil: webhooks cannot be created.
	MaxWebhooksPerUser   int
	WebhookTimeout       time.Duration
	WebhookRetrySchedule []time.Duration
	WebhookDisableAfter  int
	WebhookWorkers       int
	WebhookPoll          time.Duration
	Hooks                HookSender
	// WebhookSealKey, when set, is what the webhook secrets kept in the store are sealed
	// with (see sealer); otherwise a key kept in the store is.
	WebhookSealKey string

	// With a store shared by several replicas (one that implements Coordinator):
	// ReplicaID names this replica (unique among them; default: random), RunLease is how
	// long its runs stay its own after its last heartbeat, and Cluster connects it to the
	// others (nil: it refuses to start beside another live replica).
	ReplicaID string
	RunLease  time.Duration
	Cluster   Cluster

	// Tracing, when set, gives every run a span (see AttrSessionID) whose context the
	// agent gets, so that its own spans are the run's children. nil: no spans, at no cost.
	Tracing trace.TracerProvider

	// Models are the models whose usage Stats counts by name: the ones the operator
	// configured. Usage reported for any other model (a session may name any) is counted
	// under OtherModel, so that what users choose never becomes a metric's label and the
	// table stays as small as this list.
	Models []string

	// UserTokenBudget is what one user's runs may spend per UserBudgetPeriod, in tokens
	// (input and output together); 0: no cap. UserBudgetPeriod is "day" or "month"
	// (calendar, UTC). BudgetHold is how long a model call's reservation holds tokens at
	// most: a call whose process died gives them back then (see budgets.go).
	UserTokenBudget  int64
	UserBudgetPeriod string
	BudgetHold       time.Duration

	// MaxSchedulesPerUser bounds the schedules one user keeps; ScheduleMinInterval is the
	// least time two fires of one cron may be apart; ScheduleMaxCatchUp is how many missed
	// fires catch-up ALL fires after downtime. ScheduleTick is how often a process looks
	// for schedules that are due, and ScheduleGrace how late a fire may be and still
	// count as on time rather than missed (see firing.go).
	MaxSchedulesPerUser int
	ScheduleMinInterval time.Duration
	ScheduleMaxCatchUp  int
	ScheduleTick        time.Duration
	ScheduleGrace       time.Duration

	// Clock, when set, is the service's clock instead of the system's: for tests that
	// need a time the real one cannot reach (a daylight saving change).
	Clock func() time.Time
}

// OtherModel is the name Stats.Usage counts every model under that Config.Models does not
// list.
const OtherModel = "other"

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxMessageBytes:    32 << 10,
		MaxReplyBytes:      1 << 20,
		MaxTitleLength:     200,
		MaxPageSize:        100,
		DefaultPageSize:    20,
		Workers:            16,
		RunsPerUser:        2,
		MaxQueuedRuns:      20,
		MaxSessionMessages: 10000,
		MaxBranches:        100,
		MaxForkMessages:    1000,
		MaxShareLinks:      100,

		MaxSessionsPerUser: 1000,
		MaxUserBytes:       100 << 20,
		FlushInterval:      100 * time.Millisecond,
		RoundCommands:      128,
		RoundGap:           20 * time.Millisecond,
		TailEvents:         1024,
		ReadBatch:          256,
		MaxSubscriptions:   100000,
		StopTimeout:        3 * time.Second,
		WriteRetry:         30 * time.Second,
		CompactAfter:       500 * time.Millisecond,
		InputExpiry:        24 * time.Hour,
		ToolPolicies:       map[string]ToolPolicy{},
		RunLease:           15 * time.Second,

		UserBudgetPeriod: "month",
		BudgetHold:       10 * time.Minute,

		MaxSchedulesPerUser:  50,
		ScheduleMinInterval:  time.Minute,
		ScheduleMaxCatchUp:   10,
		ScheduleTick:         time.Second,
		ScheduleGrace:        time.Minute,
		ViewerRetention:      168 * time.Hour,
		DeliveryRetention:    168 * time.Hour,
		MaxWebhooksPerUser:   10,
		WebhookTimeout:       15 * time.Second,
		WebhookRetrySchedule: []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour},
		WebhookDisableAfter:  20,
		WebhookWorkers:       8,
		WebhookPoll:          time.Second,
	}
}

// fill gives every zero field its default.
func (c *Config) fill() {
	d := DefaultConfig()
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&c.MaxMessageBytes, d.MaxMessageBytes)
	pick(&c.MaxReplyBytes, d.MaxReplyBytes)
	pick(&c.MaxTitleLength, d.MaxTitleLength)
	pick(&c.MaxPageSize, d.MaxPageSize)
	pick(&c.DefaultPageSize, d.DefaultPageSize)
	pick(&c.Workers, d.Workers)
	pick(&c.RunsPerUser, d.RunsPerUser)
	pick(&c.MaxQueuedRuns, d.MaxQueuedRuns)
	pick(&c.MaxSessionMessages, d.MaxSessionMessages)
	pick(&c.MaxBranches, d.MaxBranches)
	pick(&c.MaxForkMessages, d.MaxForkMessages)
	pick(&c.MaxShareLinks, d.MaxShareLinks)
	pick(&c.MaxSessionsPerUser, d.MaxSessionsPerUser)
	if c.MaxUserBytes <= 0 {
		c.MaxUserBytes = d.MaxUserBytes
	}
	pick(&c.TailEvents, d.TailEvents)
	pick(&c.ReadBatch, d.ReadBatch)
	pick(&c.MaxSubscriptions, d.MaxSubscriptions)
	pick(&c.RoundCommands, d.RoundCommands)
	if c.RoundGap < 0 {
		c.RoundGap = d.RoundGap
	}
	if c.FlushInterval < 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = d.StopTimeout
	}
	if c.WriteRetry <= 0 {
		c.WriteRetry = d.WriteRetry
	}
	if c.CompactAfter <= 0 {
		c.CompactAfter = d.CompactAfter
	}
	if c.InputExpiry <= 0 {
		c.InputExpiry = d.InputExpiry
	}
	if c.ToolPolicies == nil {
		c.ToolPolicies = d.ToolPolicies
	}
	if c.RunLease <= 0 {
		c.RunLease = d.RunLease
	}
	if c.UserTokenBudget < 0 {
		c.UserTokenBudget = 0
	}
	if c.UserBudgetPeriod != "day" {
		c.UserBudgetPeriod = d.UserBudgetPeriod
	}
	for _, p := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.BudgetHold, d.BudgetHold}, {&c.ScheduleMinInterval, d.ScheduleMinInterval},
		{&c.ScheduleTick, d.ScheduleTick}, {&c.ScheduleGrace, d.ScheduleGrace},
	} {
		if *p.v <= 0 {
			*p.v = p.def
		}
	}
	pick(&c.MaxSchedulesPerUser, d.MaxSchedulesPerUser)
	pick(&c.ScheduleMaxCatchUp, d.ScheduleMaxCatchUp)
	for _, p := range []struct{ v, def *time.Duration }{
		{&c.ViewerRetention, &d.ViewerRetention}, {&c.DeliveryRetention, &d.DeliveryRetention},
		{&c.WebhookTimeout, &d.WebhookTimeout}, {&c.WebhookPoll, &d.WebhookPoll},
	} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	pick(&c.MaxWebhooksPerUser, d.MaxWebhooksPerUser)
	pick(&c.WebhookDisableAfter, d.WebhookDisableAfter)
	pick(&c.WebhookWorkers, d.WebhookWorkers)
	if len(c.WebhookRetrySchedule) == 0 {
		c.WebhookRetrySchedule = d.WebhookRetrySchedule
	}
}
