package e2e

// End-to-end tests of the openai agent through the whole server: a real guest user talks
// GraphQL over HTTP and websockets to a server whose openai agent streams from a
// fakellm.Server, which speaks the chat-completions streaming wire format and records every
// request, so that each test can say both what the user saw and what the model was sent.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// llmKey is the API key the server is configured with. The provider gets it; a user never
// does.
const llmKey = "sk-e2e-Vq7RzT2mLx9PwKd41"

// gatedReply streams before, then holds the stream open until gate is closed, then
// streams after: a provider that is still writing while the user reads the beginning.
func gatedReply(gate <-chan struct{}, before, after []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""))
		for _, p := range before {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.TextDelta(p), ""))
		}
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		for _, p := range after {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.TextDelta(p), ""))
		}
		fakellm.WriteSSE(w, fakellm.Chunk(`{}`, "stop"), fakellm.Done)
	}
}

// toolCallReply streams one function call the way OpenAI does: the ID and name first,
// then the arguments in fragments, then finish_reason "tool_calls".
func toolCallReply(id, name, args string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.ToolCallDelta(0, id, name), ""))
		for len(args) > 0 {
			n := min(len(args), 7)
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.ArgumentsDelta(0, args[:n]), ""))
			args = args[n:]
		}
		fakellm.WriteSSE(w, fakellm.Chunk(`{}`, "tool_calls"), fakellm.Done)
	}
}

// slowReply streams n chunks "w1 ", "w2 ", … one every interval, like a slow provider. It
// stops as soon as the request's context ends (the client hung up), and then closes
// hungUp.
func slowReply(n int, interval time.Duration, quit <-chan struct{}) (h http.HandlerFunc, hungUp <-chan struct{}) {
	hung := make(chan struct{})
	return func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""))
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 1; i <= n; i++ {
			select {
			case <-r.Context().Done():
				close(hung)
				return
			case <-quit:
				return
			case <-tick.C:
			}
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.TextDelta(fmt.Sprintf("w%d ", i)), ""))
		}
		fakellm.WriteSSE(w, fakellm.Chunk(`{}`, "stop"), fakellm.Done)
	}, hung
}

// startOpenAI starts the whole server with the openai agent talking to f.
func startOpenAI(t *testing.T, store string, f *fakellm.Server, change func(*app.Config)) *testApp {
	t.Helper()
	return startApp(t, store, func(c *app.Config) {
		c.OpenAI.BaseURL = f.URL + "/v1"
		c.OpenAI.APIKey = llmKey
		if change != nil {
			change(c)
		}
	})
}

// openAISession creates a session that uses the openai agent, with more settings.
func openAISession(c *tgtest.Client, settings map[string]any) string {
	c.T.Helper()
	s := map[string]any{"agent": "openai"}
	for k, v := range settings {
		s[k] = v
	}
	return c.CreateSession(s)
}

// equalLines compares transcripts and reports the difference.
func equalLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got: %q\nwant: %q", what, got, want)
	}
}

// checkToolCallsAnswered fails the test unless, in every request, each tool call of an
// assistant message is answered by a tool message with its ID before the next assistant
// or user message: what the chat-completions API requires of a request.
func checkToolCallsAnswered(t *testing.T, reqs []*fakellm.Request) {
	t.Helper()
	for i, r := range reqs {
		open := map[string]bool{}
		msgs := r.Body.Messages
		for j, m := range msgs {
			switch m.Role {
			case "tool":
				if !open[m.ToolCallID] {
					t.Errorf("request #%d, message %d: tool message for %q, which no pending tool call has", i+1, j, m.ToolCallID)
				}
				delete(open, m.ToolCallID)
				continue
			}
			for id := range open {
				t.Errorf("request #%d: tool call %q is not answered before message %d (%s)", i+1, id, j, m)
			}
			clear(open)
			for _, c := range m.ToolCalls {
				if c.ID == "" || open[c.ID] {
					t.Errorf("request #%d, message %d: tool call ID %q is empty or repeated", i+1, j, c.ID)
				}
				open[c.ID] = true
			}
		}
		for id := range open {
			t.Errorf("request #%d: tool call %q is not answered at the end", i+1, id)
		}
	}
}

// assistantReplies returns the MessageCompleted events of assistant messages.
func assistantReplies(evs []tgtest.Event) []*tgtest.Message {
	var out []*tgtest.Message
	for _, ev := range evs {
		if ev.Typename == "MessageCompleted" && ev.Message.Role == "ASSISTANT" {
			out = append(out, ev.Message)
		}
	}
	return out
}

// checkChunks fails the test unless the chunks of message id tile its content exactly:
// each starts where the previous ended, and together they are content. It returns how
// many chunks there were.
func checkChunks(t *testing.T, evs []tgtest.Event, id, content string) int {
	t.Helper()
	var got strings.Builder
	n, runes := 0, 0
	for _, ev := range evs {
		if ev.Typename != "MessageChunk" || ev.MessageID != id {
			continue
		}
		if ev.Offset != runes {
			t.Errorf("chunk %d of %s starts at %d, want %d (after %q)", n+1, id, ev.Offset, runes, got.String())
		}
		n++
		runes += len([]rune(ev.Delta))
		got.WriteString(ev.Delta)
	}
	if got.String() != content {
		t.Errorf("concatenated deltas of %s = %q, stored content %q", id, got.String(), content)
	}
	return n
}

const respondMutation = `mutation($q: ID!, $a: String!){ respondToQuestion(input:{questionId:$q, answer:$a}){ question { id answer } run { id status } } }`

const choicesQuery = `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
  __typename ... on QuestionAsked { question { id prompt choices } } } }`

// askedQuestion reads a second subscription (sub) until its QuestionAsked, and returns the
// question as that subscriber saw it, choices included.
func askedQuestion(t *testing.T, sub <-chan tgtest.Frame) (id, prompt string, choices []string) {
	t.Helper()
	deadline := time.NewTimer(tgtest.Wait)
	defer deadline.Stop()
	for {
		select {
		case f, ok := <-sub:
			if !ok || f.Complete || len(f.Errors) > 0 {
				t.Fatalf("question subscription ended before QuestionAsked: %+v", f.Errors)
			}
			var ev struct {
				MessageStream struct {
					Typename string `json:"__typename"`
					Question struct {
						ID, Prompt string
						Choices    []string
					}
				}
			}
			if err := json.Unmarshal(f.Data, &ev); err != nil {
				t.Fatalf("decoding %s: %v", f.Data, err)
			}
			if q := ev.MessageStream; q.Typename == "QuestionAsked" {
				return q.Question.ID, q.Question.Prompt, q.Question.Choices
			}
		case <-deadline.C:
			t.Fatalf("no QuestionAsked within %v", tgtest.Wait)
		}
	}
}

// waitingSession is what a session shows while its run waits for an answer.
type waitingSession struct {
	Status          string
	ActiveRun       *struct{ ID, Status string }
	PendingQuestion *struct {
		ID, Prompt string
		Choices    []string
	}
}

func sessionState(c *tgtest.Client, sid string) waitingSession {
	c.T.Helper()
	var out struct{ Session waitingSession }
	c.Must(`query($s: ID!){ session(id: $s){ status activeRun { id status } pendingQuestion { id prompt choices } } }`,
		map[string]any{"s": sid}, &out)
	return out.Session
}

// historyToolCall is a tool call as the message history shows it.
type historyToolCall struct {
	ID, Name, Status, Output string
	Result                   *string
}

// toolCallsInHistory returns every tool call of the session's messages, oldest first.
func toolCallsInHistory(c *tgtest.Client, sid string) []historyToolCall {
	c.T.Helper()
	var out struct {
		Session struct {
			Messages struct {
				Edges []struct {
					Node struct{ ToolCalls []historyToolCall }
				}
			}
		}
	}
	c.Must(`query($s: ID!){ session(id: $s){ messages(first: 100){ edges { node { toolCalls { id name status output result } } } } } }`,
		map[string]any{"s": sid}, &out)
	var calls []historyToolCall
	for _, e := range out.Session.Messages.Edges {
		calls = append(calls, e.Node.ToolCalls...)
	}
	return calls
}

func kinds(msgs []tgtest.Message) string {
	var ks []string
	for _, m := range msgs {
		ks = append(ks, m.Role+"/"+m.Kind)
	}
	return strings.Join(ks, " ")
}

func TestOpenAIAgentListedOnlyWhenConfigured(t *testing.T) {
	agentNames := func(c *tgtest.Client) (names []string, descs []string) {
		var out struct {
			Agents []struct{ Name, Description string }
		}
		c.Must(`{ agents { name description } }`, nil, &out)
		for _, a := range out.Agents {
			names = append(names, a.Name)
			descs = append(descs, a.Description)
		}
		return names, descs
	}

	plain := startApp(t, "memory", nil)
	c := guest(t, plain)
	if names, _ := agentNames(c); slices.Contains(names, "openai") || !slices.Contains(names, "demo") {
		t.Errorf("agents without openai configured = %q, want demo and no openai", names)
	}
	r := c.Do(`mutation{ createTalkSession(input:{settings:{agent:"openai"}}){ id } }`, nil)
	if r.Code() != "BAD_USER_INPUT" {
		t.Errorf("an openai session on a server without it: %+v, want BAD_USER_INPUT", r.Errors)
	}

	f := fakellm.New(t)
	configured := startOpenAI(t, "memory", f, nil)
	c = guest(t, configured)
	names, descs := agentNames(c)
	i := slices.Index(names, "openai")
	if i < 0 || !slices.Contains(names, "demo") {
		t.Fatalf("agents with openai configured = %q, want demo and openai", names)
	}
	if descs[i] == "" || strings.Contains(descs[i], llmKey) {
		t.Errorf("openai description = %q", descs[i])
	}
	if n := len(f.Requests()); n != 0 {
		t.Errorf("listing agents made %d requests to the provider", n)
	}
}

func TestOpenAIAgentStreamsReplyAndSendsHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		gate := make(chan struct{})
		f := fakellm.New(t,
			gatedReply(gate, []string{"Hello"}, []string{", wor", "ld! ", "Brief ", "enough."}),
			fakellm.TextReply("Rust ", "is ", "fast."))
		a := startOpenAI(t, store, f, nil)
		c := guest(t, a)
		sid := openAISession(c, map[string]any{"model": "m-1", "systemPrompt": "be brief", "temperature": 0.5})
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))

		_, run := c.Send(sid, "What is Go?")
		// The user reads the beginning while the provider is still writing: streaming.
		first := evs.Until("the first chunk", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
		if first.Delta != "Hello" || first.Offset != 0 {
			t.Errorf("first chunk = %q at %d, want %q at 0", first.Delta, first.Offset, "Hello")
		}
		close(gate)
		if end := evs.Until("run ends", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("run ended %s (%s)", end.Run.Status, end.Run.Error)
		}
		replies := assistantReplies(evs.All)
		if len(replies) != 1 {
			t.Fatalf("%d assistant messages completed, want 1", len(replies))
		}
		reply := replies[0]
		if reply.Content != "Hello, world! Brief enough." || reply.Status != "COMPLETE" || reply.RunID != run {
			t.Errorf("reply = %+v", reply)
		}
		if n := checkChunks(t, evs.All, reply.ID, reply.Content); n < 2 {
			t.Errorf("reply came in %d chunks, want at least 2", n)
		}

		reqs := f.Requests()
		if len(reqs) != 1 {
			t.Fatalf("provider received %d requests, want 1", len(reqs))
		}
		r := reqs[0]
		if r.Body.Model != "m-1" || r.Body.Temperature == nil || *r.Body.Temperature != 0.5 || !r.Body.Stream {
			t.Errorf("request: model %q, temperature %v, stream %v; want m-1, 0.5, true\n%s", r.Body.Model, r.Body.Temperature, r.Body.Stream, r.Raw)
		}
		if r.Header.Get("Authorization") != "Bearer "+llmKey {
			t.Errorf("Authorization = %q, want the configured key", r.Header.Get("Authorization"))
		}
		if tools := r.ToolNames(); !slices.Contains(tools, "ask_user") || slices.Contains(tools, "shell") {
			t.Errorf("tools offered = %q, want ask_user and no shell (not enabled)", tools)
		}
		equalLines(t, "first request", r.Transcript(), []string{"system: be brief", "user: What is Go?"})

		// The second message sends the whole conversation.
		_, run2 := c.Send(sid, "And Rust?")
		if end := evs.Until("second run ends", tgtest.RunEnds(run2)); end.Run.Status != "COMPLETED" {
			t.Fatalf("second run ended %s (%s)", end.Run.Status, end.Run.Error)
		}
		reqs = f.Requests()
		if len(reqs) != 2 {
			t.Fatalf("provider received %d requests, want 2", len(reqs))
		}
		equalLines(t, "second request", reqs[1].Transcript(), []string{
			"system: be brief", "user: What is Go?", "assistant: Hello, world! Brief enough.", "user: And Rust?",
		})
		if reqs[1].Body.Model != "m-1" {
			t.Errorf("second request model = %q", reqs[1].Body.Model)
		}
		msgs := c.Messages(sid)
		if got, want := kinds(msgs), "USER/TEXT ASSISTANT/TEXT USER/TEXT ASSISTANT/TEXT"; got != want {
			t.Fatalf("history = %s, want %s", got, want)
		}
		if msgs[1].Content != reply.Content || msgs[3].Content != "Rust is fast." || msgs[3].Status != "COMPLETE" {
			t.Errorf("history = %+v", msgs)
		}
		r2 := assistantReplies(evs.All)
		checkChunks(t, evs.All, r2[len(r2)-1].ID, "Rust is fast.")
	})
}

const askArgs = `{"question":"Which city?","choices":["Paris","Rome"]}`

func TestOpenAIAskUserRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		f := fakellm.New(t,
			toolCallReply("call_ask1", "ask_user", askArgs),
			fakellm.TextReply("Rome ", "it is."))
		a := startOpenAI(t, store, f, nil)
		c := guest(t, a)
		sid := openAISession(c, nil)
		ws := c.Connect("graphql-transport-ws")
		cursor := c.Cursor(sid)
		_, evs := ws.Stream(sid, cursor)
		_, sub := ws.Subscribe(choicesQuery, map[string]any{"s": sid, "a": cursor})

		_, run := c.Send(sid, "Plan a trip")
		started := evs.Until("ToolCallStarted", func(e tgtest.Event) bool { return e.Typename == "ToolCallStarted" })
		if started.ToolCall.Name != "ask_user" || started.ToolCall.Status != "RUNNING" || started.ToolCall.Arguments != askArgs {
			t.Errorf("tool call started = %+v", started.ToolCall)
		}
		q := evs.Until("QuestionAsked", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
		if q.Question.Prompt != "Which city?" || q.Question.RunID != run {
			t.Errorf("question = %+v", q.Question)
		}
		qid, prompt, choices := askedQuestion(t, sub)
		if qid != q.Question.ID || prompt != "Which city?" || !slices.Equal(choices, []string{"Paris", "Rome"}) {
			t.Errorf("QuestionAsked: %s %q %q; want %s \"Which city?\" [Paris Rome]", qid, prompt, choices, q.Question.ID)
		}
		s := sessionState(c, sid)
		if s.Status != "WAITING_FOR_INPUT" || s.ActiveRun == nil || s.ActiveRun.ID != run || s.PendingQuestion == nil ||
			s.PendingQuestion.ID != q.Question.ID || !slices.Equal(s.PendingQuestion.Choices, []string{"Paris", "Rome"}) {
			t.Fatalf("session while waiting = %+v", s)
		}

		var out struct {
			RespondToQuestion struct {
				Question struct{ ID, Answer string }
				Run      struct{ ID, Status string }
			}
		}
		c.Must(respondMutation, map[string]any{"q": q.Question.ID, "a": "Rome"}, &out)
		if out.RespondToQuestion.Run.ID != run || out.RespondToQuestion.Question.Answer != "Rome" {
			t.Errorf("respondToQuestion = %+v", out.RespondToQuestion)
		}
		if end := evs.Until("run ends", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("run ended %s (%s)", end.Run.Status, end.Run.Error)
		}
		var finished *tgtest.Event
		for i, ev := range evs.All {
			if ev.Typename == "ToolCallFinished" && ev.ToolCall.ID == started.ToolCall.ID {
				finished = &evs.All[i]
			}
		}
		if finished == nil || finished.ToolCall.Status != "COMPLETED" || finished.ToolCall.Result != "Rome" {
			t.Errorf("ask_user call finished = %+v, want COMPLETED with result Rome", finished)
		}

		reqs := f.Requests()
		if len(reqs) != 2 {
			t.Fatalf("provider received %d requests, want 2", len(reqs))
		}
		// The model gets back the ID it gave the call, not the service's.
		id := "call_ask1"
		equalLines(t, "request after the answer", reqs[1].Transcript(), []string{
			"user: Plan a trip",
			"assistant: [" + id + " ask_user " + askArgs + "]",
			"tool " + id + ": Rome",
		})
		checkToolCallsAnswered(t, reqs)

		replies := assistantReplies(evs.All)
		last := replies[len(replies)-1]
		if last.Content != "Rome it is." || last.Status != "COMPLETE" || last.RunID != run {
			t.Errorf("final reply = %+v", last)
		}
		checkChunks(t, evs.All, last.ID, last.Content)
		msgs := c.Messages(sid)
		if got := kinds(msgs); !strings.HasSuffix(got, "ASSISTANT/QUESTION USER/ANSWER ASSISTANT/TEXT") || !strings.HasPrefix(got, "USER/TEXT ") {
			t.Errorf("history kinds = %s, want the user's message, …, the question, the answer, the reply", got)
		}
		if n := len(msgs); n < 3 || msgs[n-2].Content != "Rome" || msgs[n-1].Content != "Rome it is." {
			t.Errorf("history = %+v", msgs)
		}
	})
}

func TestOpenAIAnswerAfterRestart(t *testing.T) {
	f := fakellm.New(t,
		toolCallReply("call_ask1", "ask_user", askArgs),
		fakellm.TextReply("Rome ", "it is, then."))
	a1 := startOpenAI(t, "sqlite", f, nil)
	c := guest(t, a1)
	sid := openAISession(c, nil)
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "Plan a trip")
	started := evs.Until("ToolCallStarted", func(e tgtest.Event) bool { return e.Typename == "ToolCallStarted" })
	q := evs.Until("QuestionAsked", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })

	// The server stops while the question waits, and starts again on the same database.
	ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
	a1.Close(ctx)
	cancel()
	a2 := serveApp(t, a1.Config)
	c2 := &tgtest.Client{T: t, Base: a2.URL, Token: c.Token, HTTP: c.HTTP}

	s := sessionState(c2, sid)
	if s.Status != "WAITING_FOR_INPUT" || s.ActiveRun == nil || s.ActiveRun.ID != run || s.ActiveRun.Status != "WAITING_FOR_INPUT" ||
		s.PendingQuestion == nil || s.PendingQuestion.ID != q.Question.ID || s.PendingQuestion.Prompt != "Which city?" ||
		!slices.Equal(s.PendingQuestion.Choices, []string{"Paris", "Rome"}) {
		t.Fatalf("session after the restart = %+v", s)
	}
	if n := len(f.Requests()); n != 1 {
		t.Fatalf("provider received %d requests before the answer, want 1", n)
	}

	ws2 := c2.Connect("graphql-transport-ws")
	_, evs2 := ws2.Stream(sid, c2.Cursor(sid))
	var out struct {
		RespondToQuestion struct{ Run struct{ ID string } }
	}
	c2.Must(respondMutation, map[string]any{"q": q.Question.ID, "a": "Rome"}, &out)
	if out.RespondToQuestion.Run.ID != run {
		t.Errorf("the answer went on run %s, want the waiting run %s", out.RespondToQuestion.Run.ID, run)
	}
	if end := evs2.Until("run ends", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("run ended %s (%s)", end.Run.Status, end.Run.Error)
	}

	reqs := f.Requests()
	if len(reqs) != 2 {
		t.Fatalf("provider received %d requests, want 2", len(reqs))
	}
	id := "call_ask1" // the model's own, after a restart too
	equalLines(t, "request after the restart", reqs[1].Transcript(), []string{
		"user: Plan a trip",
		"assistant: [" + id + " ask_user " + askArgs + "]",
		"tool " + id + ": Rome",
	})
	checkToolCallsAnswered(t, reqs)

	replies := assistantReplies(evs2.All)
	if len(replies) == 0 || replies[len(replies)-1].Content != "Rome it is, then." {
		t.Fatalf("replies after the answer = %+v", replies)
	}
	msgs := c2.Messages(sid)
	if got := kinds(msgs); !strings.HasSuffix(got, "ASSISTANT/QUESTION USER/ANSWER ASSISTANT/TEXT") {
		t.Errorf("history kinds = %s", got)
	}
	if last := msgs[len(msgs)-1]; last.Content != "Rome it is, then." || last.Status != "COMPLETE" || last.RunID != run {
		t.Errorf("final reply in history = %+v", last)
	}

	// The ask_user call was answered: the history shows it completed with the answer, not
	// running forever.
	calls := toolCallsInHistory(c2, sid)
	if len(calls) != 1 || calls[0].ID != started.ToolCall.ID || calls[0].Name != "ask_user" || calls[0].Status != "COMPLETED" ||
		calls[0].Result == nil || *calls[0].Result != "Rome" {
		t.Errorf("tool calls in the history = %+v, want the ask_user call %s COMPLETED with result Rome", calls, started.ToolCall.ID)
	}
}

func TestOpenAIStopDuringStream(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		f := fakellm.New(t)
		slow, hungUp := slowReply(400, 50*time.Millisecond, f.Quit())
		f.Add(slow)
		a := startOpenAI(t, store, f, nil)
		c := guest(t, a)
		sid := openAISession(c, nil)
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "Tell me a long story")

		evs.Until("three chunks of text", func(e tgtest.Event) bool {
			return e.Typename == "MessageChunk" && strings.Contains(tgtest.Text(evs.All)[e.MessageID], "w3 ")
		})
		stopped := time.Now()
		if r := c.Cancel(sid); r == nil || r.ID != run || r.Status != "CANCELLED" {
			t.Fatalf("cancelRun = %+v", r)
		}
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "CANCELLED" {
			t.Fatalf("run ended %s, want CANCELLED", end.Run.Status)
		}
		if d := time.Since(stopped); d > 3*time.Second {
			t.Errorf("the run took %v to end after cancelRun", d)
		}

		// The agent hangs up on the provider: no tokens are paid for after the stop.
		select {
		case <-hungUp:
		case <-time.After(tgtest.Wait):
			t.Fatalf("the provider's request was still open %v after cancelRun", tgtest.Wait)
		}

		replies := assistantReplies(evs.All)
		if len(replies) != 1 {
			t.Fatalf("%d assistant messages completed, want 1", len(replies))
		}
		partial := replies[0]
		if partial.Status != "INTERRUPTED" || !strings.HasPrefix(partial.Content, "w1 w2 w3 ") || strings.Contains(partial.Content, "w400") {
			t.Errorf("partial reply = %+v", partial)
		}
		checkChunks(t, evs.All, partial.ID, partial.Content)
		msgs := c.Messages(sid)
		if len(msgs) != 2 || msgs[1].ID != partial.ID || msgs[1].Status != "INTERRUPTED" || msgs[1].Content != partial.Content {
			t.Errorf("history = %+v, want the partial reply %q kept INTERRUPTED", msgs, partial.Content)
		}
		if s := sessionState(c, sid); s.Status != "IDLE" || s.ActiveRun != nil {
			t.Errorf("session after the stop = %+v", s)
		}
		if n := len(f.Requests()); n != 1 {
			t.Errorf("provider received %d requests, want 1", n)
		}
	})
}

func TestOpenAIShellToolStopKillsCommand(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the shell tool runs sh")
	}
	eachStore(t, func(t *testing.T, store string) {
		dir := t.TempDir()
		// The command makes a FIFO, says "started", then holds the FIFO open for writing
		// while it sleeps, in the shell and in sleep: the test's reader sees EOF only once
		// every process of the command has died.
		const command = "mkfifo alive && echo started && exec 3>alive && sleep 30"
		args, _ := json.Marshal(map[string]string{"command": command})
		f := fakellm.New(t, toolCallReply("call_sh1", "shell", string(args)))
		a := startOpenAI(t, store, f, func(c *app.Config) {
			c.OpenAI.Shell = true
			c.OpenAI.ShellDir = dir
			c.Service.ToolPolicies = map[string]service.ToolPolicy{"shell": service.PolicyAllow} // no approval in the way
			c.AuthSecret = memberSecret
		})
		c := member(t, a) // guests are not offered the shell
		sid := openAISession(c, nil)
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "Run something slow")

		started := evs.Until("ToolCallStarted", func(e tgtest.Event) bool { return e.Typename == "ToolCallStarted" })
		if started.ToolCall.Name != "shell" || started.ToolCall.Arguments != string(args) {
			t.Errorf("tool call started = %+v", started.ToolCall)
		}
		if tools := f.Requests()[0].ToolNames(); !slices.Contains(tools, "shell") {
			t.Errorf("tools offered = %q, want shell", tools)
		}
		evs.Until(`ToolCallOutput "started"`, func(e tgtest.Event) bool {
			return e.Typename == "ToolCallOutput" && e.ToolCallID == started.ToolCall.ID && strings.Contains(e.Delta, "started")
		})

		// Open the FIFO's reading end: this returns once the command holds its writing end.
		fifo := filepath.Join(dir, "alive")
		opened := make(chan *os.File, 1)
		go func() {
			r, err := os.Open(fifo)
			if err != nil {
				t.Errorf("open fifo: %v", err)
			}
			opened <- r
		}()
		t.Cleanup(func() { // releases the opener if the command never got there
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		})
		var reader *os.File
		select {
		case reader = <-opened:
		case <-time.After(tgtest.Wait):
			t.Fatal("the command never opened its FIFO")
		}
		if reader == nil {
			t.FailNow()
		}
		defer reader.Close()
		gone := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, reader) // returns at EOF: no writer is left
			gone <- err
		}()

		if r := c.Cancel(sid); r == nil || r.ID != run {
			t.Fatalf("cancelRun = %+v", r)
		}
		stopped := time.Now()
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "CANCELLED" || time.Since(stopped) > 3*time.Second {
			t.Fatalf("run ended %s after %v, want CANCELLED within a few seconds", end.Run.Status, time.Since(stopped))
		}
		select {
		case err := <-gone:
			if err != nil {
				t.Errorf("reading the FIFO: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the command (sh or its sleep) was still alive 5s after cancelRun")
		}

		var finished *tgtest.Event
		for i, ev := range evs.All {
			if ev.Typename == "ToolCallFinished" && ev.ToolCall.ID == started.ToolCall.ID {
				finished = &evs.All[i]
			}
		}
		if finished == nil || finished.ToolCall.Status != "CANCELLED" || !strings.Contains(finished.ToolCall.Output, "started") {
			t.Errorf("shell call finished = %+v, want CANCELLED with output \"started\"", finished)
		}
		calls := toolCallsInHistory(c, sid)
		if len(calls) != 1 || calls[0].Name != "shell" || calls[0].Status == "RUNNING" || calls[0].Status == "COMPLETED" ||
			calls[0].Output != "started\n" {
			t.Errorf("tool calls in the history = %+v, want the shell call ended (CANCELLED) with output %q", calls, "started\n")
		}
		if n := len(f.Requests()); n != 1 {
			t.Errorf("provider received %d requests, want 1 (nothing after the stop)", n)
		}
	})
}

func TestOpenAIProviderErrorFailsRunWithoutLeakingKey(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		// Like OpenAI, the provider quotes the key it refused.
		body := `{"error":{"message":"Incorrect API key provided: ` + llmKey + `. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
		f := fakellm.New(t,
			fakellm.ErrorReply(http.StatusUnauthorized, body),
			fakellm.TextReply("Back ", "again."))
		a := startOpenAI(t, store, f, nil)
		c := guest(t, a)
		sid := openAISession(c, nil)
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))

		_, run := c.Send(sid, "Hello?")
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "FAILED" {
			t.Fatalf("run ended %s, want FAILED", end.Run.Status)
		}
		msg := end.Run.Error
		if msg == "" || len(msg) > 300 || strings.ContainsAny(msg, "\n{}") || strings.Contains(msg, "goroutine") ||
			strings.Contains(msg, llmKey) || strings.Contains(msg, llmKey[:12]) {
			t.Errorf("run error %q is not fit for a user (or leaks the key)", msg)
		}
		if n := len(f.Requests()); n != 1 {
			t.Errorf("provider received %d requests, want 1 (a refused key is not retried)", n)
		}

		// The session stays usable.
		_, run2 := c.Send(sid, "Hello again?")
		if end := evs.Until("next run ends", tgtest.RunEnds(run2)); end.Run.Status != "COMPLETED" {
			t.Fatalf("next run ended %s (%s)", end.Run.Status, end.Run.Error)
		}
		replies := assistantReplies(evs.All)
		if last := replies[len(replies)-1]; last.Content != "Back again." || last.Status != "COMPLETE" || last.RunID != run2 {
			t.Errorf("reply = %+v", last)
		}
		reqs := f.Requests()
		if len(reqs) != 2 {
			t.Fatalf("provider received %d requests, want 2", len(reqs))
		}
		if tr := reqs[1].Transcript(); len(tr) == 0 || !strings.HasPrefix(tr[0], "user: Hello?") || !strings.HasSuffix(tr[len(tr)-1], "Hello again?") {
			t.Errorf("request after the failure = %q", tr)
		}
		for i, r := range reqs {
			if r.Header.Get("Authorization") != "Bearer "+llmKey {
				t.Errorf("request #%d: Authorization %q, want the configured key", i+1, r.Header.Get("Authorization"))
			}
		}

		// Nothing the user can read holds the key: not the stream, not the history.
		seen, _ := json.Marshal(evs.All)
		var hist struct{ Session json.RawMessage }
		c.Must(`query($s: ID!){ session(id: $s){ activeRun { error } messages(first: 100){ edges { node { content status toolCalls { output result error } } } } } }`,
			map[string]any{"s": sid}, &hist)
		for what, text := range map[string]string{"the event stream": string(seen), "the history": string(hist.Session)} {
			if strings.Contains(text, llmKey) {
				t.Errorf("%s contains the API key: %s", what, text)
			}
		}
	})
}

// syncBuffer is a log the server writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(substr string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(b.buf.String(), "\n") {
		var m map[string]any
		if strings.Contains(l, substr) && json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Every failed run is one log line for the operator: its code, its cause (the API key
// redacted), the session, the run, the agent and the model (the session's, else the
// server's default), whatever failed it: a provider out of reach, one that refuses the
// request echoing the key, one that keeps answering 429 (retried, still one line), the
// demo agent's /fail.
func TestProviderFailureIsLoggedOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close() // nothing listens there now
	echo := `{"error":{"message":"invalid key ` + llmKey + `"}}`
	limited := fakellm.ErrorReply(429, `{"error":{"message":"slow down"}}`, "Retry-After", "0")
	for _, tc := range []struct {
		name, baseURL string
		script        []http.HandlerFunc
		settings      map[string]any // nil: the demo agent
		content       string
		model, code   string
		userSees      string
		cause         []string // in the log line's err
	}{
		{name: "unreachable", baseURL: closed, settings: map[string]any{"model": "gpt-test"}, content: "hello",
			model: "gpt-test", code: "unavailable", userSees: "could not reach the model provider", cause: []string{"connection refused"}},
		{name: "refused with the key echoed", script: []http.HandlerFunc{fakellm.ErrorReply(400, echo)}, settings: map[string]any{}, content: "hello",
			model: "server-model", code: "unavailable", userSees: "rejected the request (HTTP 400)", cause: []string{"HTTP 400", "invalid key [redacted]"}},
		{name: "rate limited", script: []http.HandlerFunc{limited, limited, limited}, settings: map[string]any{"model": "m-2"}, content: "hello",
			model: "m-2", code: "unavailable", userSees: "rate limiting", cause: []string{"HTTP 429", "slow down"}},
		{name: "demo /fail", content: "/fail", model: "demo", code: "internal", userSees: "failed, as you asked", cause: []string{"failed, as you asked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.baseURL
			if tc.script != nil {
				base = fakellm.New(t, tc.script...).URL + "/v1"
			}
			env := map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_URL": "memory:", "OPENAI_BASE_URL": base, "OPENAI_API_KEY": llmKey,
				"OPENAI_MODEL": "server-model", "RATE_LIMIT": "1000", "RATE_BURST": "1000"}
			cfg, err := app.LoadConfig(nil, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			log := &syncBuffer{}
			a := serveAppLog(t, cfg, log)
			c := guest(t, a)
			agent, sid := "demo", ""
			if tc.settings != nil {
				agent, sid = "openai", openAISession(c, tc.settings)
			} else {
				sid = c.CreateSession(nil)
			}
			ws := c.Connect("graphql-transport-ws")
			_, evs := ws.Stream(sid, c.Cursor(sid))
			_, run := c.Send(sid, tc.content)
			end := evs.Until("run ends", tgtest.RunEnds(run))
			if end.Run.Status != "FAILED" || !strings.Contains(end.Run.Error, tc.userSees) {
				t.Fatalf("run ended %s: %q, want FAILED saying %q", end.Run.Status, end.Run.Error, tc.userSees)
			}
			lines := log.lines(`"run failed"`)
			if len(lines) != 1 {
				t.Fatalf("%d log lines for the failed run, want 1:\n%s", len(lines), log.buf.String())
			}
			l := lines[0]
			for k, want := range map[string]string{"level": "ERROR", "session": sid, "run": run, "agent": agent, "model": tc.model, "code": tc.code} {
				if got, _ := l[k].(string); got != want {
					t.Errorf("log %s = %q, want %q", k, got, want)
				}
			}
			cause, _ := l["err"].(string)
			for _, want := range tc.cause {
				if !strings.Contains(cause, want) {
					t.Errorf("log err = %q, want it to say %q", cause, want)
				}
			}
			if strings.Contains(log.buf.String(), llmKey) {
				t.Error("the API key is in the log")
			}
		})
	}
}

// The openai agent asks for usage in the stream; what the provider reports reaches the
// run (run(id).usage, cached tokens included) and the per-model counters.
func TestOpenAIUsageReachesTheRunAndTheMetrics(t *testing.T) {
	f := fakellm.New(t, fakellm.TextReply("One ", "two ", "three."))
	a := startOpenAI(t, "sqlite", f, func(c *app.Config) { c.OpenAI.Models = []string{"gpt-usage"} })
	c := guest(t, a)
	sid := openAISession(c, map[string]any{"model": "gpt-usage"})
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "count")
	if end := evs.Until("run ends", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("run ended %s: %s", end.Run.Status, end.Run.Error)
	}
	var out struct {
		Run struct {
			Usage *struct{ InputTokens, OutputTokens, CachedInputTokens int }
		}
	}
	c.Must(`query($r: ID!){ run(id: $r){ usage { inputTokens outputTokens cachedInputTokens } } }`, map[string]any{"r": run}, &out)
	if u := out.Run.Usage; u == nil || u.InputTokens != 20 || u.OutputTokens != 3 || u.CachedInputTokens != 5 {
		t.Errorf("usage = %+v, want 20 in (5 cached), 3 out, as the provider said", u)
	}
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`talkgraph_model_tokens_total{kind="input",model="gpt-usage"} 20`,
		`talkgraph_model_tokens_total{kind="output",model="gpt-usage"} 3`, `talkgraph_model_tokens_total{kind="cached_input",model="gpt-usage"} 5`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// twoCallsReply streams two function calls in one turn, as a model calling tools in
// parallel does.
func twoCallsReply(name string, ids, args [2]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := range 2 {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.ToolCallDelta(i, ids[i], name), ""),
				fakellm.Chunk(fakellm.ArgumentsDelta(i, args[i]), ""))
		}
		fakellm.WriteSSE(w, fakellm.Chunk(`{}`, "tool_calls"), fakellm.Done)
	}
}

// Two shell calls in one turn wait for approval together (the shell tool is ASK by
// default); the user decides them in the other order, approving the second and rejecting
// the first: only the second runs, as soon as it is approved, and the model gets both
// results, under its own call IDs, in one request.
func TestOpenAIApprovalsOfOneTurn(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the shell tool runs sh")
	}
	eachStore(t, func(t *testing.T, store string) {
		dir := t.TempDir()
		one, _ := json.Marshal(map[string]string{"command": "echo one > one.txt; echo one"})
		two, _ := json.Marshal(map[string]string{"command": "echo two"})
		f := fakellm.New(t, twoCallsReply("shell", [2]string{"call_one", "call_two"}, [2]string{string(one), string(two)}),
			fakellm.TextReply("Done."))
		a := startOpenAI(t, store, f, func(c *app.Config) {
			c.OpenAI.Shell = true
			c.OpenAI.ShellDir = dir
			c.AuthSecret = memberSecret
		})
		c := member(t, a) // guests are not offered the shell
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "Run both")
		calls := map[string]string{} // arguments → tool call ID
		for len(calls) < 2 {
			e := evs.Until("an approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
			calls[e.ToolCall.Arguments] = e.ToolCall.ID
		}
		if r := decide(c, map[string]any{"toolCallId": calls[string(two)], "decision": "APPROVE"}); len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
		ran := evs.Until("the approved call's end", func(e tgtest.Event) bool {
			return e.Typename == "ToolCallFinished" && e.ToolCall.ID == calls[string(two)]
		})
		if ran.ToolCall.Status != "COMPLETED" || !strings.Contains(ran.ToolCall.Output, "two") {
			t.Errorf("the approved call: %+v", ran.ToolCall)
		}
		if r := decide(c, map[string]any{"toolCallId": calls[string(one)], "decision": "REJECT", "reason": "not that one"}); len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
		if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("run ended %s", end.Run.Status)
		}
		if _, err := os.Stat(filepath.Join(dir, "one.txt")); err == nil {
			t.Error("the rejected call ran")
		}
		if n := len(f.Requests()); n != 2 {
			t.Fatalf("%d requests to the model, want 2: the results go back together", n)
		}
		var results []string
		for _, line := range f.Request(1).Transcript() {
			if strings.HasPrefix(line, "tool ") {
				results = append(results, line)
			}
		}
		if len(results) != 2 || !strings.HasPrefix(results[0], "tool call_one: the user rejected this call: not that one") ||
			!strings.HasPrefix(results[1], "tool call_two: ") || !strings.Contains(results[1], "two") {
			t.Errorf("the results the model got: %q", results)
		}
	})
}

// askingTool is a tool whose calls wait for the user's approval by its own default, and
// that counts its runs.
type askingTool struct{ ran atomic.Int32 }

func (*askingTool) Name() string                      { return "note" }
func (*askingTool) Description() string               { return "Notes the text." }
func (*askingTool) Parameters() map[string]any        { return nil }
func (*askingTool) DefaultPolicy() service.ToolPolicy { return service.PolicyAsk }
func (n *askingTool) Call(_ context.Context, args string, out openai.ToolOutput) (string, error) {
	n.ran.Add(1)
	_ = out.Output("noted")
	return "noted " + args, nil
}

// A run of the openai agent waiting for an approval when the server stops is woken after
// the restart by the decision: the call runs once, the model goes on, and the reply that
// held the call is not left STREAMING.
func TestOpenAIApprovalAfterRestart(t *testing.T) {
	args := `{"text":"milk"}`
	f := fakellm.New(t, toolCallReply("call_note", "note", args), fakellm.TextReply("Noted ", "it."))
	tool := &askingTool{}
	a1 := startOpenAI(t, "sqlite", f, func(c *app.Config) { c.OpenAI.Tools = []openai.Tool{tool} })
	c := guest(t, a1)
	sid := openAISession(c, nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "Note milk")
	asked := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })

	ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
	a1.Close(ctx)
	cancel()
	a2 := serveApp(t, a1.Config)
	c2 := &tgtest.Client{T: t, Base: a2.URL, Token: c.Token, HTTP: c.HTTP}
	_, evs2 := c2.Connect("graphql-transport-ws").Stream(sid, c2.Cursor(sid))
	if r := decide(c2, map[string]any{"toolCallId": asked.ToolCall.ID, "decision": "APPROVE"}); len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	if end := evs2.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("the woken run ended %s (%s)", end.Run.Status, end.Run.Error)
	}
	if n := tool.ran.Load(); n != 1 {
		t.Errorf("the approved call ran %d times, want once", n)
	}
	msgs := c2.Messages(sid)
	for _, m := range msgs {
		if m.Status == "STREAMING" {
			t.Errorf("after the run, %s message %s %q is STREAMING", m.Role, m.ID, m.Content)
		}
	}
	if last := msgs[len(msgs)-1]; last.Content != "Noted it." || last.Status != "COMPLETE" {
		t.Errorf("the reply after the decision: %+v", last)
	}
}

// The operator's policies are final, a tool's own default holds unless the operator names
// it, and the shell is not offered to guests: tried over the API with the openai agent as
// a guest and as a signed-in user.
func TestOpenAIOperatorPoliciesAreFinal(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the shell tool runs sh")
	}
	shellArgs, _ := json.Marshal(map[string]string{"command": "echo hi"})
	t.Run("a session cannot lift the server's DENY", func(t *testing.T) {
		f := fakellm.New(t, fakellm.TextReply("ok"))
		a := startOpenAI(t, "sqlite", f, func(c *app.Config) {
			c.OpenAI.Shell = true
			c.AuthSecret = memberSecret
			c.Service.ToolPolicies = map[string]service.ToolPolicy{"shell": service.PolicyDeny}
		})
		c := member(t, a)
		resp := c.Do(`mutation($s: SessionSettingsInput){ createTalkSession(input: {settings: $s}){ id } }`,
			map[string]any{"s": map[string]any{"agent": "openai", "toolPolicies": []map[string]any{{"tool": "shell", "policy": "ALLOW"}}}})
		if resp.Code() != "BAD_USER_INPUT" || !strings.Contains(resp.Errors[0].Message, "shell") {
			t.Fatalf("a session lifting the server's DENY: %s %+v", resp.Code(), resp.Errors)
		}
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "hello")
		evs.Until("the run's end", tgtest.RunEnds(run))
		if names := f.Request(0).ToolNames(); slices.Contains(names, "shell") {
			t.Errorf("the model was offered %v under the server's DENY", names)
		}
	})
	t.Run("naming other tools leaves the shell ASK", func(t *testing.T) {
		f := fakellm.New(t, toolCallReply("call_sh", "shell", string(shellArgs)))
		a := startOpenAI(t, "sqlite", f, func(c *app.Config) {
			c.OpenAI.Shell = true
			c.OpenAI.ShellDir = t.TempDir()
			c.AuthSecret = memberSecret
			c.Service.ToolPolicies = map[string]service.ToolPolicy{"mcp__files__*": service.PolicyAllow}
		})
		c := member(t, a)
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		c.Send(sid, "run it")
		started := evs.Until("the call", func(e tgtest.Event) bool { return e.Typename == "ToolCallStarted" })
		if started.ToolCall.Status != "AWAITING_APPROVAL" {
			t.Errorf("the shell call began %s, want AWAITING_APPROVAL", started.ToolCall.Status)
		}
		c.Cancel(sid)
	})
	t.Run("guests are not offered the shell", func(t *testing.T) {
		f := fakellm.New(t, fakellm.TextReply("ok"), fakellm.TextReply("ok"))
		a := startOpenAI(t, "sqlite", f, func(c *app.Config) {
			c.OpenAI.Shell = true
			c.AuthSecret = memberSecret
		})
		g := guest(t, a)
		var agents struct {
			Agents []struct {
				Name  string
				Tools []struct{ Name, Policy string }
			}
		}
		g.Must(`{ agents { name tools { name policy } } }`, nil, &agents)
		for _, ag := range agents.Agents {
			for _, tool := range ag.Tools {
				if tool.Name == "shell" && tool.Policy != "DENY" {
					t.Errorf("agents lists the shell to a guest as %s, want DENY", tool.Policy)
				}
			}
		}
		resp := g.Do(`mutation($s: SessionSettingsInput){ createTalkSession(input: {settings: $s}){ id } }`,
			map[string]any{"s": map[string]any{"agent": "openai", "toolPolicies": []map[string]any{{"tool": "shell", "policy": "ASK"}}}})
		if resp.Code() != "BAD_USER_INPUT" {
			t.Errorf("a guest asking for the shell: %s %+v", resp.Code(), resp.Errors)
		}
		for i, c := range []*tgtest.Client{g, member(t, a)} {
			sid := openAISession(c, nil)
			_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
			_, run := c.Send(sid, "hello")
			evs.Until("the run's end", tgtest.RunEnds(run))
			offered := slices.Contains(f.Request(i).ToolNames(), "shell")
			if want := i == 1; offered != want {
				t.Errorf("offered the shell: %v, want %v (guest: %v)", offered, want, i == 0)
			}
		}
	})
}

// memberSecret is the token secret of the servers of tests that sign users in as members
// (not guests), with member.
const memberSecret = "the e2e tests' token secret, long enough"

// member signs a new user in with a token of memberSecret: a user of the operator's, not
// a guest.
func member(t testing.TB, a *testApp) *tgtest.Client {
	t.Helper()
	tok, _, err := (&jwtauth.Auth{Secret: []byte(memberSecret)}).Issue("member-" + uuid.NewString())
	if err != nil {
		t.Fatal(err)
	}
	return &tgtest.Client{T: t, Base: a.URL, Token: tok, HTTP: &http.Client{}}
}
