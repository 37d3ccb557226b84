package client

import (
	"context"
	"slices"
)

// CreateSession creates a session; input may be nil for the defaults (the demo agent,
// busy policy INTERRUPT). Its StreamCursor follows it from its first event.
func (c *Client) CreateSession(ctx context.Context, input *CreateTalkSessionInput) (*Session, error) {
	out, err := createTalkSession(ctx, c.gql, input)
	if err != nil {
		return nil, err
	}
	return &out.CreateTalkSession, nil
}

// Session reads a session: its status, active run, what it waits on (PendingQuestions,
// PendingApprovals) and its StreamCursor, all as of one moment. A session that does not
// exist or is not yours is an *Error with code NotFound.
func (c *Client) Session(ctx context.Context, id string) (*Session, error) {
	out, err := session(ctx, c.gql, id)
	if err != nil {
		return nil, err
	}
	if out.Session == nil {
		return nil, &Error{Code: NotFound, Message: "session not found"}
	}
	return out.Session, nil
}

// Messages reads a session's whole history, oldest first, and the stream cursor read
// with its newest page: Follow after it to go on from the history with no gap and no
// duplicate. A session that does not exist or is not yours is NotFound.
func (c *Client) Messages(ctx context.Context, sessionID string) ([]Message, string, error) {
	const page = 100 // the most the server gives at once
	var pages [][]Message
	var cursor string
	var before *string
	for {
		out, err := messages(ctx, c.gql, sessionID, new(page), before)
		if err != nil {
			return nil, "", err
		}
		if out.Session == nil {
			return nil, "", &Error{Code: NotFound, Message: "session not found"}
		}
		if cursor == "" {
			cursor = out.Session.StreamCursor
		}
		conn := out.Session.Messages
		msgs := make([]Message, len(conn.Edges))
		for i, e := range conn.Edges {
			msgs[i] = e.Node
		}
		pages = append(pages, msgs)
		if !conn.PageInfo.HasPreviousPage || conn.PageInfo.StartCursor == nil {
			break
		}
		before = conn.PageInfo.StartCursor
	}
	slices.Reverse(pages)
	return slices.Concat(pages...), cursor, nil
}

// AddMessage sends a user message and starts (or queues) a run of the session's agent.
// Give input.IdempotencyKey (a new UUID per message) and retry a call whose answer was
// lost with the same input: the server stores one message and answers the same.
func (c *Client) AddMessage(ctx context.Context, input AddMessageInput) (*AddMessagePayload, error) {
	out, err := addMessage(ctx, c.gql, input)
	if err != nil {
		return nil, err
	}
	return &out.AddMessage, nil
}

// CancelRun is the stop button: it ends the session's active run, keeping its partial
// reply, and returns it (status CANCELLED); nil when nothing was running.
func (c *Client) CancelRun(ctx context.Context, sessionID string) (*Run, error) {
	return c.StopRun(ctx, sessionID, "")
}

// StopRun cancels the run runID of the session ("" for its active run): a queued run
// before it starts (its message stays on the branch), the active one as CancelRun does.
// It returns nil when that run has ended already; NotFound when the session has no such
// run.
func (c *Client) StopRun(ctx context.Context, sessionID, runID string) (*Run, error) {
	var id *string
	if runID != "" {
		id = &runID
	}
	out, err := cancelRun(ctx, c.gql, sessionID, id)
	if err != nil {
		return nil, err
	}
	return out.CancelRun, nil
}

// EditMessage adds a new version of your message messageID beside it (same parent),
// makes its branch current and starts a run for it, by the session's busy policy; the
// old version stays, a sibling of the new one.
func (c *Client) EditMessage(ctx context.Context, messageID, content string) (*AddMessagePayload, error) {
	out, err := editMessage(ctx, c.gql, EditMessageInput{MessageId: messageID, Content: content})
	if err != nil {
		return nil, err
	}
	return &out.EditMessage, nil
}

// Regenerate starts a run whose reply is a new version of the agent's reply messageID,
// on the history up to the message it answered.
func (c *Client) Regenerate(ctx context.Context, messageID string) (*Run, error) {
	out, err := regenerate(ctx, c.gql, RegenerateInput{MessageId: messageID})
	if err != nil {
		return nil, err
	}
	return &out.Regenerate.Run, nil
}

// SelectBranch makes the branch through messageID current (continuing below it to the
// child added last at each step) and returns the session. Conflict while the agent works.
func (c *Client) SelectBranch(ctx context.Context, messageID string) (*Session, error) {
	out, err := selectBranch(ctx, c.gql, SelectBranchInput{MessageId: messageID})
	if err != nil {
		return nil, err
	}
	return &out.SelectBranch, nil
}

// ForkSession makes a new session of yours holding the current branch up to messageID;
// title "" keeps the source's.
func (c *Client) ForkSession(ctx context.Context, messageID, title string) (*Session, error) {
	in := ForkSessionInput{MessageId: messageID}
	if title != "" {
		in.Title = &title
	}
	out, err := forkSession(ctx, c.gql, in)
	if err != nil {
		return nil, err
	}
	return &out.ForkSession, nil
}

// RespondToQuestion answers a question the agent waits on; the run goes on once nothing
// else waits. Answering twice, or a question withdrawn, is Conflict.
func (c *Client) RespondToQuestion(ctx context.Context, questionID, answer string) (*RespondToQuestionPayload, error) {
	out, err := respondToQuestion(ctx, c.gql, RespondToQuestionInput{QuestionId: questionID, Answer: answer})
	if err != nil {
		return nil, err
	}
	return &out.RespondToQuestion, nil
}

// DecideToolCall approves (optionally with edited Arguments) or rejects (with an optional
// Reason) a tool call awaiting approval. Deciding twice, or a call withdrawn, is Conflict.
func (c *Client) DecideToolCall(ctx context.Context, input DecideToolCallInput) (*DecideToolCallPayload, error) {
	out, err := decideToolCall(ctx, c.gql, input)
	if err != nil {
		return nil, err
	}
	return &out.DecideToolCall, nil
}

// RespondToInputs answers several questions and decides several tool calls of one
// session in one write: all of them, or none and an error naming the first that failed.
func (c *Client) RespondToInputs(ctx context.Context, input RespondToInputsInput) (*RespondToInputsPayload, error) {
	out, err := respondToInputs(ctx, c.gql, input)
	if err != nil {
		return nil, err
	}
	return &out.RespondToInputs, nil
}
