package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// subscriptionQuery is the messageStream subscription every session makes: only the
// fields the checks and the figures need.
const subscriptionQuery = `subscription($s: ID!, $a: String) { messageStream(sessionId: $s, after: $a) { __typename cursor ... on MessageAdded { message { id role status } } ... on MessageChunk { messageId delta offset } ... on MessageCompleted { message { id role status content } } ... on RunStatusChanged { run { id status } } } }`

// approvalQuery is the subscription of the approval scenario's sessions: the fields of
// subscriptionQuery and the tool call events. (The other scenarios keep the smaller
// query, so that what they measure does not change.)
const approvalQuery = `subscription($s: ID!, $a: String) { messageStream(sessionId: $s, after: $a) { __typename cursor ... on MessageAdded { message { id role status } } ... on MessageChunk { messageId delta offset } ... on MessageCompleted { message { id role status content } } ... on RunStatusChanged { run { id status } } ... on ToolApprovalRequested { toolCall { id } } ... on ToolCallOutput { toolCallId } } }`

// streamEvent is the part of a messageStream event the generator reads.
type streamEvent struct {
	Typename   string        `json:"__typename"`
	Message    *eventMessage `json:"message"`
	MessageID  string        `json:"messageId"`
	Delta      string        `json:"delta"`
	Offset     int           `json:"offset"`
	Run        *eventRun     `json:"run"`
	ToolCall   *eventCall    `json:"toolCall"`
	ToolCallID string        `json:"toolCallId"`
}

type eventCall struct {
	ID string `json:"id"`
}

type eventMessage struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Status  string `json:"status"`
	Content string `json:"content"`
}

type eventRun struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// terminalRunStatus reports whether a run in status s has ended.
func terminalRunStatus(s string) bool {
	switch s {
	case "COMPLETED", "CANCELLED", "INTERRUPTED", "FAILED":
		return true
	}
	return false
}

// textCheck follows one message's streamed text and checks that it is contiguous: each
// delta must start where the text received so far ends (offsets in code points), and
// the deltas together must equal the completed message's content. It also counts the
// words the deltas deliver, a word being a run of non-space characters, also when a
// chunk boundary falls inside it.
type textCheck struct {
	text   strings.Builder
	n      int // code points received
	words  int
	inWord bool
	bad    bool // a gap or duplicate was found; the content is no longer compared
}

// chunk adds a delta that the server says starts at offset. It returns the number of
// words the delta starts, and an error for a gap (offset beyond the text received) or a
// duplicate (offset inside it); after an error the text is no longer checked, so one
// broken message makes one error.
func (t *textCheck) chunk(delta string, offset int) (words int, err error) {
	if !t.bad && offset != t.n {
		t.bad = true
		if offset > t.n {
			err = fmt.Errorf("gap: chunk at offset %d after %d code points", offset, t.n)
		} else {
			err = fmt.Errorf("duplicate: chunk at offset %d after %d code points", offset, t.n)
		}
	}
	for _, r := range delta {
		space := unicode.IsSpace(r)
		if !space && !t.inWord {
			words++
		}
		t.inWord = !space
	}
	t.words += words
	if !t.bad {
		t.text.WriteString(delta)
	}
	t.n += utf8.RuneCountInString(delta)
	return words, err
}

// complete checks the deltas received against the message's final content. No error
// when a gap or duplicate was already reported.
func (t *textCheck) complete(content string) error {
	if t.bad {
		return nil
	}
	got := t.text.String()
	if got == content {
		return nil
	}
	i := 0
	for i < len(got) && i < len(content) && got[i] == content[i] {
		i++
	}
	return fmt.Errorf("deltas (%d code points) differ from the content (%d code points) at byte %d",
		t.n, utf8.RuneCountInString(content), i)
}

// turn is one message a scenario sends to a session and what its subscriber saw of the
// reply. The session's reader fills it in; a scenario reads it with session.result once
// done is closed (or its deadline passed).
type turn struct {
	expect    string // the reply content the agent must give; empty: not checked
	chunkWait int    // close reached after this many reply chunks

	sent       time.Time // addMessage sent
	running    time.Time // first RunStatusChanged to RUNNING
	firstChunk time.Time // first chunk of an assistant message after sent
	lastChunk  time.Time
	longest    time.Duration // longest wait between two of its chunks
	chunks     int
	msgDone    time.Time // MessageCompleted of the assistant message
	runDone    time.Time // RunStatusChanged to a final status
	status     string    // that final status
	failed     string    // why the turn cannot finish (the connection broke, the mutation failed)
	callID     string    // the tool call whose approval was requested (approval scenario)
	toolOutput time.Time // the first output of that call

	reached  chan struct{}
	asked    chan struct{} // closed when an approval is requested
	done     chan struct{}
	ended    bool
	wasReach bool
}

// turnResult is a copy of a turn's findings.
type turnResult struct {
	Sent, Running, FirstChunk, MsgDone, RunDone time.Time
	CallID                                      string
	ToolOutput                                  time.Time
	Chunks                                      int
	LongestPause                                time.Duration // between two chunks; 0 with fewer than two
	Status, Failed                              string
	Done                                        bool
}

// End is when the turn's reply and run had both finished, as the subscriber saw it.
func (r turnResult) End() time.Time {
	if r.MsgDone.After(r.RunDone) {
		return r.MsgDone
	}
	return r.RunDone
}

// session is one talk session of one user, with its websocket and subscription, and the
// state of the streams it receives.
type session struct {
	idx    int
	id     string
	token  string
	cl     *client      // where its operations go
	sub    *client      // where it subscribes
	http   *http.Client // the user's own connections
	cursor string
	query  string // its subscription: subscriptionQuery unless the scenario needs more
	scen   string
	conn   *wsConn
	errs   *errorLog

	mu     sync.Mutex
	msgs   map[string]*msgState
	words  int
	cur    *turn
	broken bool
}

type msgState struct {
	role  string
	check textCheck
}

func newSession(idx int, scen string, errs *errorLog) *session {
	return &session{idx: idx, scen: scen, errs: errs, msgs: map[string]*msgState{}}
}

// begin starts a turn: the next reply the session's subscriber sees belongs to it.
func (s *session) begin(expect string, chunkWait int) *turn {
	t := &turn{expect: expect, chunkWait: chunkWait, reached: make(chan struct{}), asked: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = t
	if s.broken {
		t.failed = "connection already broken"
		s.endLocked(t)
	}
	return t
}

// markSent records that the turn's addMessage is being sent now.
func (s *session) markSent(t *turn) {
	s.mu.Lock()
	t.sent = time.Now()
	s.mu.Unlock()
}

// abandon ends a turn that cannot finish, e.g. because its addMessage failed.
func (s *session) abandon(t *turn, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !t.ended {
		t.failed = why
		s.endLocked(t)
	}
}

// result copies the turn's findings; Done tells whether it had ended.
func (s *session) result(t *turn) turnResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return turnResult{Sent: t.sent, Running: t.running, FirstChunk: t.firstChunk, MsgDone: t.msgDone, RunDone: t.runDone,
		CallID: t.callID, ToolOutput: t.toolOutput,
		Chunks: t.chunks, LongestPause: t.longest, Status: t.status, Failed: t.failed, Done: t.ended}
}

// wordsDelivered is the number of words in all deltas the session received.
func (s *session) wordsDelivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.words
}

func (s *session) endLocked(t *turn) {
	if !t.wasReach {
		t.wasReach = true
		close(t.reached)
	}
	if !t.ended {
		t.ended = true
		close(t.done)
	}
}

// onEvent handles one messageStream event that arrived at the given time. It runs on
// the connection's reader goroutine.
func (s *session) onEvent(ev *streamEvent, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.cur
	if t != nil && t.ended {
		t = nil
	}
	switch ev.Typename {
	case "MessageAdded":
		if ev.Message != nil {
			s.msgs[ev.Message.ID] = &msgState{role: ev.Message.Role}
		}
	case "MessageChunk":
		m := s.msgs[ev.MessageID]
		if m == nil { // subscribed from the stream cursor, so its MessageAdded came first
			s.errs.add(s.scen, "chunk of a message never added", fmt.Sprintf("session %s message %s", s.id, ev.MessageID))
			m = &msgState{role: "ASSISTANT"}
			s.msgs[ev.MessageID] = m
		}
		words, err := m.check.chunk(ev.Delta, ev.Offset)
		s.words += words
		if err != nil {
			kind, _, _ := strings.Cut(err.Error(), ":")
			s.errs.add(s.scen, "chunk "+kind, fmt.Sprintf("session %s message %s: %v", s.id, ev.MessageID, err))
		}
		if t != nil && m.role != "USER" && !t.sent.IsZero() {
			if t.firstChunk.IsZero() {
				t.firstChunk = at
			} else if d := at.Sub(t.lastChunk); d > t.longest {
				t.longest = d
			}
			t.lastChunk = at
			t.chunks++
			if t.chunkWait > 0 && t.chunks >= t.chunkWait && !t.wasReach {
				t.wasReach = true
				close(t.reached)
			}
		}
	case "MessageCompleted":
		msg := ev.Message
		if msg == nil {
			return
		}
		m := s.msgs[msg.ID]
		delete(s.msgs, msg.ID)
		if msg.Role != "ASSISTANT" {
			return
		}
		if m == nil {
			m = &msgState{role: msg.Role}
		}
		if err := m.check.complete(msg.Content); err != nil {
			s.errs.add(s.scen, "content differs from deltas", fmt.Sprintf("session %s message %s: %v", s.id, msg.ID, err))
		}
		if t != nil {
			t.msgDone = at
			if t.expect != "" && msg.Status == "COMPLETE" && msg.Content != t.expect {
				s.errs.add(s.scen, "unexpected reply", fmt.Sprintf("session %s message %s: %q", s.id, msg.ID, clip(msg.Content, 80)))
			}
			s.maybeEndLocked(t)
		}
	case "ToolApprovalRequested":
		if ev.ToolCall != nil && t != nil && t.callID == "" {
			t.callID = ev.ToolCall.ID
			close(t.asked)
		}
	case "ToolCallOutput":
		if t != nil && ev.ToolCallID == t.callID && t.toolOutput.IsZero() {
			t.toolOutput = at
		}
	case "RunStatusChanged":
		if ev.Run != nil && t != nil && ev.Run.Status == "RUNNING" && t.running.IsZero() && !t.sent.IsZero() {
			t.running = at
		}
		if ev.Run != nil && t != nil && terminalRunStatus(ev.Run.Status) {
			t.runDone = at
			t.status = ev.Run.Status
			s.maybeEndLocked(t)
		}
	}
}

// maybeEndLocked ends the turn once its run has a final status and, for a completed
// run, its reply has completed too.
func (s *session) maybeEndLocked(t *turn) {
	if t.runDone.IsZero() {
		return
	}
	if t.status == "COMPLETED" && t.msgDone.IsZero() {
		return
	}
	s.endLocked(t)
}

// onBroken reports that the subscription or the connection ended without the client
// asking, and ends the current turn.
func (s *session) onBroken(category, detail string) {
	s.errs.add(s.scen, category, fmt.Sprintf("session %s: %s", s.id, detail))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broken = true
	if t := s.cur; t != nil && !t.ended {
		t.failed = category
		s.endLocked(t)
	}
}

// clip shortens s to at most n bytes for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
