// Package service is talkgraph's domain: talk sessions, messages, runs, questions and tool
// calls, the event log every client reads, the AgentService that changes them, the Runner
// interface agents implement, the Store interface storage implements, and the scheduler that
// runs agents. It imports neither GraphQL nor any database driver: adapters live in
// subpackages named after their dependency (service/inmem, service/sqlite, service/demo, …).
package service

import "time"

// BusyPolicy is what a new message does to a session whose agent is still working.
type BusyPolicy string

const (
	BusyInterrupt BusyPolicy = "INTERRUPT" // stop the run, keep its partial reply, start over
	BusyEnqueue   BusyPolicy = "ENQUEUE"   // wait until the running agent is done
	BusyReject    BusyPolicy = "REJECT"    // refuse the message with ECONFLICT
	// BusySteer hands the message to the running agent at its next step (see
	// Steerable); when nothing runs, or the agent cannot take it, it is ENQUEUE.
	BusySteer BusyPolicy = "STEER"
)

// Valid reports whether p is one of the known policies.
func (p BusyPolicy) Valid() bool {
	return p == BusyInterrupt || p == BusyEnqueue || p == BusyReject || p == BusySteer
}

// SessionStatus summarises what a session's agent is doing.
type SessionStatus string

const (
	SessionIdle            SessionStatus = "IDLE"
	SessionRunning         SessionStatus = "RUNNING"
	SessionWaitingForInput SessionStatus = "WAITING_FOR_INPUT"
)

// Role says who wrote a message.
type Role string

const (
	RoleUser      Role = "USER"
	RoleAssistant Role = "ASSISTANT"
)

// MessageKind says what a message holds besides plain text.
type MessageKind string

const (
	KindText     MessageKind = "TEXT"     // ordinary text
	KindQuestion MessageKind = "QUESTION" // the agent's question (QuestionID set)
	KindAnswer   MessageKind = "ANSWER"   // the user's answer (QuestionID set)
)

// MessageStatus is where a message is in its life.
type MessageStatus string

const (
	MessageComplete    MessageStatus = "COMPLETE"
	MessageStreaming   MessageStatus = "STREAMING"
	MessageInterrupted MessageStatus = "INTERRUPTED"
	MessageFailed      MessageStatus = "FAILED"
)

// RunStatus is where a run is in its life. QUEUED, RUNNING and WAITING_FOR_INPUT are
// active; the others are final.
type RunStatus string

const (
	RunQueued          RunStatus = "QUEUED"
	RunRunning         RunStatus = "RUNNING"
	RunWaitingForInput RunStatus = "WAITING_FOR_INPUT"
	RunCompleted       RunStatus = "COMPLETED"
	RunCancelled       RunStatus = "CANCELLED"
	RunInterrupted     RunStatus = "INTERRUPTED"
	RunFailed          RunStatus = "FAILED"
)

// Final reports whether s is a status a run never leaves.
func (s RunStatus) Final() bool {
	switch s {
	case RunCompleted, RunCancelled, RunInterrupted, RunFailed:
		return true
	}
	return false
}

// ToolCallStatus is where a tool call is in its life. AWAITING_APPROVAL waits for the
// user's decision (see ToolApproval); RUNNING runs; the others are final: REJECTED never
// ran (the user rejected it, or the tool policy denies it).
type ToolCallStatus string

const (
	ToolAwaitingApproval ToolCallStatus = "AWAITING_APPROVAL"
	ToolRunning          ToolCallStatus = "RUNNING"
	ToolCompleted        ToolCallStatus = "COMPLETED"
	ToolFailed           ToolCallStatus = "FAILED"
	ToolCancelled        ToolCallStatus = "CANCELLED"
	ToolRejected         ToolCallStatus = "REJECTED"
)

// ToolDecision is what the user decided about a call that waited for approval.
type ToolDecision string

const (
	DecisionApprove ToolDecision = "APPROVE"
	DecisionReject  ToolDecision = "REJECT"
)

// ToolPolicy says what becomes of a tool's calls: ALLOW runs them, ASK waits for the
// user's approval first, DENY never runs them (and keeps the tool from a model).
type ToolPolicy string

const (
	PolicyAllow ToolPolicy = "ALLOW"
	PolicyAsk   ToolPolicy = "ASK"
	PolicyDeny  ToolPolicy = "DENY"
)

// Valid reports whether p is one of the known policies.
func (p ToolPolicy) Valid() bool { return p == PolicyAllow || p == PolicyAsk || p == PolicyDeny }

// ToolApproval is the approval a tool call needed: what the agent asked to run it with,
// and the user's decision (nil while it waits, and for a call withdrawn without one:
// Reason then says why, e.g. "expired").
type ToolApproval struct {
	RequestedArguments string        `json:"requestedArguments"`
	Decision           *ToolDecision `json:"decision,omitempty"`
	Reason             string        `json:"reason,omitempty"`
	DecidedAt          *time.Time    `json:"decidedAt,omitempty"`
	// DecidedBy is the user who decided.
	DecidedBy string    `json:"decidedBy,omitempty"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// UTC returns a copy of a with its times in UTC, as stores keep them.
func (a ToolApproval) UTC() *ToolApproval {
	a.ExpiresAt = a.ExpiresAt.UTC()
	if a.DecidedAt != nil {
		d := a.DecidedAt.UTC()
		a.DecidedAt = &d
	}
	return &a
}

// Why an input stopped waiting without an answer or a decision (Question.WithdrawnReason,
// ToolApproval.Reason of a withdrawn call).
const (
	ReasonExpired     = "expired"
	ReasonCancelled   = "cancelled"
	ReasonStopped     = "stopped"
	ReasonInterrupted = "interrupted"
	ReasonFailed      = "the run failed"
	ReasonAgentDone   = "the agent stopped waiting"
)

// Settings are a session's agent settings. Empty strings and nil mean "the agent's default".
type Settings struct {
	Agent        string     `json:"agent"`
	Model        *string    `json:"model,omitempty"`
	SystemPrompt *string    `json:"systemPrompt,omitempty"`
	Temperature  *float64   `json:"temperature,omitempty"`
	BusyPolicy   BusyPolicy `json:"busyPolicy"`
	// ToolPolicies are the session's own policies by tool name: each at least as strict
	// as the server's for the tool (see policies.go).
	ToolPolicies map[string]ToolPolicy `json:"toolPolicies,omitempty"`
	// TokenBudget is the session's own cap on what its runs spend, in tokens (input and
	// output together); nil for none (see budgets.go).
	TokenBudget *int `json:"tokenBudget,omitempty"`
	// Guest records that the session's owner had signed in as a guest when it was
	// created: the tools that act on the server's machine (ToolInfo.Host) are not offered
	// to it unless Config.GuestHostTools says so. Not a setting a user changes (no
	// SettingsInput sets it).
	Guest bool `json:"guest,omitempty"`
}

// Size is what a session's own fields weigh against its user's storage quota: its title
// and settings.
func (s *TalkSession) Size() int64 {
	n := len(s.Title) + len(s.Settings.Agent)
	if s.Settings.Model != nil {
		n += len(*s.Settings.Model)
	}
	if s.Settings.SystemPrompt != nil {
		n += len(*s.Settings.SystemPrompt)
	}
	for name, p := range s.Settings.ToolPolicies {
		n += len(name) + len(p)
	}
	return int64(n)
}

// TalkSession is one conversation of one user with an agent.
type TalkSession struct {
	ID        string
	UserID    string
	Title     string
	Settings  Settings
	CreatedAt time.Time
	// UpdatedAt is the time of the last activity: a message, a rename, a settings change.
	UpdatedAt time.Time
	// LastSeq is the sequence number of the session's last event (0 before any); stores
	// derive it from the log.
	LastSeq int64 `json:"-"`
	// Unread is set when an assistant message completed or an input was requested after
	// the user last read the session (a SessionRead event); stores keep it as
	// Changes.Unread says.
	Unread bool `json:",omitempty"`
}

// Message is one entry of a session's history.
type Message struct {
	ID        string
	SessionID string
	// Seq is the sequence number of the MessageAdded event that began the message; it
	// orders the history.
	Seq     int64
	Role    Role
	Kind    MessageKind
	Content string
	Status  MessageStatus
	// Error says why a FAILED message failed, fit to show a user.
	Error string
	// RunID is the run that wrote an assistant message, or that a user message started.
	RunID string
	// QuestionID links QUESTION and ANSWER messages to their question.
	QuestionID string
	CreatedAt  time.Time
	// ParentID is the message before this one on its branch ("" for a session's first
	// messages): the history is a tree (see "The conversation as a tree" in the service).
	ParentID string `json:",omitempty"`
	// OffBranch is set on a message added beside the current branch rather than at its
	// end (an edit that waits for the agent, see Run.ReplyTo). Stores keep whether a
	// message is on the current branch as its MessageAdded says, and as BranchSelected
	// events change it after (Changes.Switches); later snapshots do not change it.
	OffBranch bool `json:",omitempty"`
}

// Run is one execution of a session's agent.
type Run struct {
	ID        string
	SessionID string
	UserID    string
	Status    RunStatus
	// Error says why the run failed, fit to show a user.
	Error string
	// Agent is the agent the run uses, fixed when the run is created.
	Agent string
	// Owner is the replica that runs it (see Coordinator); empty on a single server.
	Owner string
	// ReplyTo, when set, is the message the run's reply follows (an edited message, or
	// the parent of a regenerated reply): when the run starts, the branch through it,
	// ending there, becomes the current one.
	ReplyTo string `json:",omitempty"`
	// Budget is the cap the run waits on while it is WAITING_FOR_INPUT for a token
	// budget (see budgetwait.go); "" otherwise.
	Budget BudgetScope `json:",omitempty"`
	// Usage is what the agent reported its model read and wrote; nil when it reported
	// nothing.
	Usage      *Usage
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
}

// Usage counts a model's tokens, as its provider reports them.
type Usage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	// CachedInputTokens are input tokens served from the provider's prompt cache; nil
	// when the provider does not say.
	CachedInputTokens *int `json:"cachedInputTokens,omitempty"`
}

// Question is the agent asking the user, and waiting.
type Question struct {
	ID        string
	RunID     string
	SessionID string
	Prompt    string
	Choices   []string
	// Multiple lets several of Choices be picked: the answer is a JSON array of them.
	Multiple bool
	// AnswerSchema, when set, is a JSON Schema (as JSON text) the answer must satisfy,
	// the answer being JSON.
	AnswerSchema string
	Answer       *string
	AskedAt      time.Time
	AnsweredAt   *time.Time
	// ExpiresAt is when the question stops waiting (nil for questions of older releases).
	ExpiresAt *time.Time
	// Withdrawn is set when the question stopped waiting before it was answered: its run
	// ended, it expired, or the agent stopped waiting; WithdrawnReason says which.
	Withdrawn       bool
	WithdrawnReason string
	// ToolCallID is the tool call this question answers (an agent's ask_user tool), if
	// any: the answer is that call's result.
	ToolCallID string
}

// ToolCall is a tool an agent called while writing a message.
type ToolCall struct {
	ID string
	// CallID is the agent's own name for the call (a model's tool_call_id), which it gets
	// back with the history; it may be empty, and need not be unique.
	CallID     string
	RunID      string
	SessionID  string
	MessageID  string
	Name       string
	Arguments  string
	Output     string
	Result     *string
	Error      *string
	Status     ToolCallStatus
	StartedAt  time.Time
	FinishedAt *time.Time
	// Approval is the approval the call needed; nil when it needed none.
	Approval *ToolApproval
}

// EventType names a kind of session event.
type EventType string

const (
	EventMessageAdded     EventType = "MessageAdded"
	EventMessageChunk     EventType = "MessageChunk"
	EventMessageCompleted EventType = "MessageCompleted"
	EventRunStatusChanged EventType = "RunStatusChanged"
	EventQuestionAsked    EventType = "QuestionAsked"
	EventQuestionAnswered EventType = "QuestionAnswered"
	EventToolCallStarted  EventType = "ToolCallStarted"
	EventToolCallOutput   EventType = "ToolCallOutput"
	EventToolCallFinished EventType = "ToolCallFinished"
	EventSessionUpdated   EventType = "SessionUpdated"
	// EventToolApprovalRequested: a call waits for the user's decision (ToolCall set);
	// EventToolApprovalDecided: the user approved it (it runs now) or rejected it.
	EventToolApprovalRequested EventType = "ToolApprovalRequested"
	EventToolApprovalDecided   EventType = "ToolApprovalDecided"
	// EventQuestionWithdrawn: a question stopped waiting without an answer (Question set).
	EventQuestionWithdrawn EventType = "QuestionWithdrawn"
	// EventBranchSelected: the current branch changed; Key is its last message (the
	// leaf) and Branch says which messages left it and which joined it.
	EventBranchSelected EventType = "BranchSelected"
	// EventSessionRead: the user read the session (markSessionRead): it is no longer
	// unread. Only the viewer's stream shows it (a SessionChanged).
	EventSessionRead EventType = "SessionRead"
)

// Chunky reports whether events of type t stream text (a delta at an offset) that the log
// may later coalesce.
func (t EventType) Chunky() bool { return t == EventMessageChunk || t == EventToolCallOutput }

// Event is one entry of a session's log. Which payload fields are set depends on Type:
// Message for MessageAdded/MessageCompleted; Key, Delta and Offset for MessageChunk (Key is
// the message ID) and ToolCallOutput (Key is the tool call ID, MessageID its message); Run,
// Question, ToolCall, Session for the others. Payloads are snapshots taken when the event
// was appended.
type Event struct {
	SessionID string
	// Seq numbers the session's events: 1, 2, 3, … with no gap. The service assigns it
	// (it owns each session's log) and the Store checks that a batch's events follow the
	// log it holds (ErrNotNext).
	Seq  int64
	Type EventType
	At   time.Time

	Key       string
	MessageID string
	Delta     string
	// Offset is where Delta starts in the streamed text, in Unicode code points.
	Offset int
	// CoalescedFrom is set on a chunk event that replaced the chunks of the same stream
	// from that sequence number up to its own (see the log's compaction).
	CoalescedFrom int64

	Message  *Message      `json:",omitempty"`
	Run      *Run          `json:",omitempty"`
	Question *Question     `json:",omitempty"`
	ToolCall *ToolCall     `json:",omitempty"`
	Session  *TalkSession  `json:",omitempty"`
	Branch   *BranchSwitch `json:",omitempty"`
}

// BranchSwitch is what a BranchSelected event changes: the messages that leave the
// current branch (Off) and those that join it (On).
type BranchSwitch struct {
	Off []string `json:"off,omitempty"`
	On  []string `json:"on,omitempty"`
}

// Cursor is the position after one event, as handed to clients. Off is the end offset, in
// code points, of a chunk event's stream (0 for other events); it lets a replay over
// coalesced chunks give exactly the text the client has not seen.
type Cursor struct {
	Seq int64
	Off int
}
