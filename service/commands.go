package service

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// Every change a user asks of the service is a Command, and goes in through one door,
// exec. A command is data: the operation's name (its GraphQL mutation's), who asks, the
// session it changes, and the operation's own arguments. exec does what every command
// needs once (the caller, the arguments on their face, whether the server takes work,
// which session is meant), then has the command done where the session's agent runs
// (peers.route: here, or on the replica that runs it, which takes the command in through
// the same door), and tags the operation's span with what it concerns.
//
// Each operation is one row of ops: its name and its functions. A new operation is a
// new row; nothing else dispatches on names.

// Command is one change a user asks of a session.
type Command struct {
	// Op names the operation: one of Operations, as the GraphQL mutation is named.
	Op string
	// UserID is who asks, Guest whether they signed in as a guest.
	UserID string
	Guest  bool
	// SessionID is the session the command changes; exec finds it when the arguments
	// name something else (a message, a question, a tool call).
	SessionID string
	// Args are the operation's arguments: a pointer to the type its row makes (args).
	Args any
}

// operation is one row of the table of operations.
type operation struct {
	// args returns a new, empty value of the operation's arguments, for decoding a
	// command another replica sent.
	args func() any
	// check refuses, before anything is read, arguments wrong on their face (EINVALID);
	// nil when there is nothing to check.
	check func(c *core, args any) error
	// locate returns the session the command changes, for an operation whose arguments
	// name something else (ENOTFOUND when it is missing or not the caller's); nil when
	// the command names its session (checked as an ID).
	locate func(ctx context.Context, c *core, userID string, args any) (string, error)
	// local is set for an operation done where it is asked, never routed: one that makes
	// a new session.
	local bool
	// do does the command where the session's agent runs.
	do func(ctx context.Context, s *Service, cmd *Command) (*Reply, error)
}

// ops is the table of operations, by name. The rows are added by the files that define
// the operations (add), each in an init of its own.
var ops = map[string]*operation{}

// addOperation adds a row to ops.
func addOperation(name string, op *operation) {
	if _, taken := ops[name]; taken {
		panic("service: operation " + name + " twice")
	}
	ops[name] = op
}

// Operations lists the names of every operation, sorted: every mutation of the API is
// one (a test holds the schema to it).
func Operations() []string {
	names := make([]string, 0, len(ops))
	for name := range ops {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// exec is the one way in for every change: it does cmd for the user in ctx (or, for a
// command another replica forwarded, for the user it names), where the session's agent
// runs. EUNAUTHORIZED without a user; EINVALID for arguments wrong on their face or a
// malformed ID; EUNAVAILABLE while the server shuts down (checked before anything is
// read); then whatever the operation answers.
func (s *Service) exec(ctx context.Context, cmd *Command) (*Reply, error) {
	op := ops[cmd.Op]
	s.stats.command(cmd.Op)
	if op == nil {
		return nil, Errorf(EINVALID, "unknown command %q", truncate(cmd.Op, 40))
	}
	fwd := forwarded(ctx)
	if !fwd {
		u, err := user(ctx)
		if err != nil {
			return nil, err
		}
		cmd.UserID, cmd.Guest = u, GuestFrom(ctx)
	}
	if op.check != nil {
		if err := op.check(s.core, cmd.Args); err != nil {
			return nil, err
		}
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	switch {
	case op.locate != nil && !(fwd && cmd.SessionID != ""):
		id, err := op.locate(ctx, s.core, cmd.UserID, cmd.Args)
		if err != nil {
			return nil, err
		}
		cmd.SessionID = id
	case op.locate == nil && !op.local:
		if err := checkID("session ID", cmd.SessionID); err != nil {
			return nil, err
		}
	}
	var r *Reply
	var err error
	if op.local || fwd {
		r, err = op.do(ctx, s, cmd)
	} else {
		r, err = s.peers.route(ctx, cmd, func(ctx context.Context) (*Reply, error) { return op.do(ctx, s, cmd) })
	}
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = &Reply{}
	}
	runID := ""
	if r.Run != nil {
		runID = r.Run.ID
	}
	s.annotate(ctx, cmd.SessionID, runID)
	return r, nil
}

// handle does a command another replica forwarded here (peers): through exec, as the
// user the command names, never sent on.
func (s *Service) handle(ctx context.Context, cmd *Command) *Reply {
	ctx = context.WithValue(WithUser(ctx, cmd.UserID), forwardedKey{}, true)
	if cmd.Guest {
		ctx = WithGuest(ctx)
	}
	return replyOf(s.exec(ctx, cmd))
}

type forwardedKey struct{}

// forwarded reports whether the operation in ctx came from another replica: it is done
// here, never sent on.
func forwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

// Reply is what a command returned: its error's code and message, or its results.
//
// NotServed is set instead by a replica that does not run the session's agent (it never
// did, or handed the run over meanwhile): the sender looks for the agent's replica again
// (Cluster.Send answers ErrNoServer for it). It is a field of its own rather than an
// error code or message, so that no rewording and no client-facing code is taken for it.
type Reply struct {
	NotServed bool          `json:"notServed,omitempty"`
	Code      string        `json:"code,omitempty"`
	Error     string        `json:"error,omitempty"`
	Message   *Message      `json:"message,omitempty"`
	Run       *Run          `json:"run,omitempty"`
	Session   *TalkSession  `json:"session,omitempty"`
	Questions []*Question   `json:"questions,omitempty"`
	ToolCalls []*ToolCall   `json:"toolCalls,omitempty"`
	Schedule  *Schedule     `json:"schedule,omitempty"`
	Fire      *ScheduleFire `json:"fire,omitempty"`
	ShareLink *ShareLink    `json:"shareLink,omitempty"`

	// view is the session as the command left it, when it was done here (a reply from
	// another replica has none: the view is read again).
	view *SessionView
	// out is the answer of a local operation (never sent between replicas), which its
	// caller reads as it is.
	out any
}

// NotServedReply is the reply of a replica that does not run the session's agent.
func NotServedReply() *Reply { return &Reply{NotServed: true} }

func (r *Reply) err() error {
	switch {
	case r.NotServed:
		return ErrNoServer
	case r.Code == "":
		return nil
	}
	return Errorf(r.Code, "%s", r.Error)
}

func replyOf(r *Reply, err error) *Reply {
	if r == nil || err != nil {
		r = &Reply{}
	}
	if err != nil {
		r.Code, r.Error = ErrorCode(err), ErrorMessage(err)
	}
	return r
}

// viewReply is the reply of a command that answers its session.
func viewReply(v *SessionView, err error) (*Reply, error) {
	if err != nil {
		return nil, err
	}
	return &Reply{Session: v.TalkSession, view: v}, nil
}

// answeredView returns the session a command's reply answers: as the command left it, or
// read again when another replica did it.
func (s *Service) answeredView(ctx context.Context, r *Reply, sessionID string) (*SessionView, error) {
	if r.view != nil {
		return r.view, nil
	}
	return s.view(ctx, sessionID)
}

// commandJSON is a Command's wire form: Args as the operation's JSON.
type commandJSON struct {
	Op        string          `json:"op"`
	UserID    string          `json:"user"`
	Guest     bool            `json:"guest,omitempty"`
	SessionID string          `json:"session"`
	Args      json.RawMessage `json:"args,omitempty"`
}

// MarshalJSON writes the command with its arguments.
func (c *Command) MarshalJSON() ([]byte, error) {
	w := commandJSON{Op: c.Op, UserID: c.UserID, Guest: c.Guest, SessionID: c.SessionID}
	if c.Args != nil {
		b, err := json.Marshal(c.Args)
		if err != nil {
			return nil, err
		}
		w.Args = b
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a command, its arguments as the operation's type (left as raw JSON
// for an operation this process does not know: exec refuses it).
func (c *Command) UnmarshalJSON(b []byte) error {
	var w commandJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = Command{Op: w.Op, UserID: w.UserID, Guest: w.Guest, SessionID: w.SessionID}
	op := ops[w.Op]
	if op == nil {
		if len(w.Args) > 0 {
			c.Args = w.Args
		}
		return nil
	}
	c.Args = op.args()
	if len(w.Args) > 0 {
		if err := json.Unmarshal(w.Args, c.Args); err != nil {
			return fmt.Errorf("the arguments of %s: %w", w.Op, err)
		}
	}
	return nil
}

// Encode returns the command's wire form, for Cluster implementations.
func (c *Command) Encode() ([]byte, error) { return json.Marshal(c) }

// DecodeCommand reads a command encoded with Encode.
func DecodeCommand(b []byte) (*Command, error) {
	var c Command
	err := json.Unmarshal(b, &c)
	return &c, err
}

// Encode returns the reply's wire form.
func (r *Reply) Encode() ([]byte, error) { return json.Marshal(r) }

// DecodeReply reads a reply encoded with Encode.
func DecodeReply(b []byte) (*Reply, error) {
	var r Reply
	err := json.Unmarshal(b, &r)
	return &r, err
}

// commandCounts counts the commands that came in, by operation (Stats.Commands).
type commandCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *counters) command(op string) {
	if ops[op] == nil {
		op = "unknown" // what a client names never becomes a key
	}
	c.cmds.mu.Lock()
	if c.cmds.n == nil {
		c.cmds.n = map[string]int64{}
	}
	c.cmds.n[op]++
	c.cmds.mu.Unlock()
}
