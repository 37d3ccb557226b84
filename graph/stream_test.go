package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"

	"github.com/talkgraph/talkgraph/graph/generated"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// testServer is a service in memory with one session of its user, and gqlgen's executor
// over the schema's resolvers.
type testServer struct {
	svc  *service.Service
	exec *executor.Executor
	ctx  context.Context // the session's user
	sid  string
	log  *slog.Logger
}

// newTestServer starts a service whose agent says words, one chunk each, and whose
// replies are never folded (see service.Config.CompactAfter).
func newTestServer(t testing.TB, words int) *testServer {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.FlushInterval = 0
	cfg.CompactAfter = time.Hour
	cfg.MaxReplyBytes = 1 << 30
	cfg.TailEvents = 1 << 16
	agents := &service.Agents{}
	agents.Register("words", "", service.RunnerFunc(func(ctx context.Context, req service.RunRequest, out service.Output) error {
		for range words {
			if err := out.Text("word "); err != nil {
				return err
			}
			time.Sleep(50 * time.Microsecond) // each word a chunk of its own, mostly
		}
		return nil
	}))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(context.Background(), inmem.New(), agents, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	ctx := service.WithUser(context.Background(), "user-1")
	agent := "words"
	sess, err := svc.CreateTalkSession(ctx, "test", service.SettingsInput{Agent: &agent})
	if err != nil {
		t.Fatal(err)
	}
	exec := executor.New(generated.NewExecutableSchema(generated.Config{Resolvers: &Resolver{Service: svc}}))
	return &testServer{svc: svc, exec: exec, ctx: ctx, sid: sess.ID, log: log}
}

// cursor is the session's stream cursor now.
func (ts *testServer) cursor(t testing.TB) string {
	t.Helper()
	v, err := ts.svc.View(ts.ctx, ts.sid)
	if err != nil {
		t.Fatal(err)
	}
	return v.StreamCursor
}

// reply sends a message and waits for its run to end.
func (ts *testServer) reply(t testing.TB) {
	t.Helper()
	_, run, err := ts.svc.AddMessage(ts.ctx, ts.sid, "go", "")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := ts.svc.Run(ts.ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Final() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is still %s", r.Status)
		}
		time.Sleep(time.Millisecond)
	}
}

// subscribe starts the subscription doc (with the session as $s and after as $a) as a
// transport does.
func (ts *testServer) subscribe(t testing.TB, doc, after string, vars map[string]any, notify func()) (*Stream, *graphql.Response) {
	t.Helper()
	all := map[string]any{"s": ts.sid, "a": after}
	for k, v := range vars {
		all[k] = v
	}
	ctx := graphql.StartOperationTrace(ts.ctx)
	rc, errs := ts.exec.CreateOperationContext(ctx, &graphql.RawParams{Query: doc, Variables: all})
	if errs != nil {
		t.Fatalf("%s: %v", doc, errs)
	}
	return Subscribe(ctx, ts.exec, rc, notify, ts.log)
}

// frames is an Output that writes each result as a websocket transport frames it, into
// one buffer used again, and counts them.
type frames struct {
	buf     bytes.Buffer
	data    []string // the results' data, when kept
	cursors []string // the cursors Send was given, when kept
	keep    bool
	sent    int
	stop    int // Send answers false from this result on, when not 0
}

func (f *frames) Send(resp *graphql.Response, cursor string) bool {
	if f.stop > 0 && f.sent >= f.stop {
		return false
	}
	f.sent++
	f.buf.Reset()
	f.buf.WriteString(`{"id":"1","type":"next","payload":{"data":`)
	f.buf.Write(resp.Data)
	if len(resp.Errors) > 0 {
		b, _ := json.Marshal(resp.Errors)
		f.buf.WriteString(`,"errors":`)
		f.buf.Write(b)
	}
	f.buf.WriteString("}}")
	if f.keep {
		f.data = append(f.data, string(resp.Data))
		f.cursors = append(f.cursors, cursor)
	}
	return true
}

const chunkDoc = `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
	__typename cursor ... on MessageChunk { messageId delta offset } ... on RunStatusChanged { run { status } } } }`

// TestPumpSendsTheLogInTurns: a stream sends every event of the log after its cursor, in
// order, at most perTurn a turn, saying StreamMore when a turn was full and StreamIdle once
// it caught up.
func TestPumpSendsTheLogInTurns(t *testing.T) {
	ts := newTestServer(t, 150)
	start := ts.cursor(t)
	ts.reply(t)
	st, refused := ts.subscribe(t, chunkDoc, start, nil, func() {})
	if st == nil {
		t.Fatalf("refused: %+v", refused.Errors)
	}
	defer st.Close()
	out := &frames{keep: true}
	for turn := 0; ; turn++ {
		before := out.sent
		state := st.Pump(ts.ctx, out)
		sent := out.sent - before
		if state == StreamIdle {
			break
		}
		if state != StreamMore || sent != perTurn {
			t.Fatalf("turn %d: %v after %d events", turn, state, sent)
		}
	}
	if out.sent <= perTurn {
		t.Fatalf("%d events: too few to take turns", out.sent)
	}
	var text strings.Builder
	for _, d := range out.data {
		var ev struct {
			MessageStream struct{ Delta string }
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		text.WriteString(ev.MessageStream.Delta)
	}
	if want := strings.Repeat("word ", 150); text.String() != want {
		t.Errorf("the chunks say %q, want %q", text.String(), want)
	}
	if !strings.Contains(out.data[len(out.data)-1], `"COMPLETED"`) {
		t.Errorf("the last event is %s, not the run's end", out.data[len(out.data)-1])
	}
}

// TestPumpSendsEachEventWithItsCursor: Send is given each event's cursor, the one its
// data carries, whether the fast renderer or the executor rendered it, and whether or not
// the operation selects the cursor.
func TestPumpSendsEachEventWithItsCursor(t *testing.T) {
	ts := newTestServer(t, 20)
	start := ts.cursor(t)
	ts.reply(t)
	pump := func(doc string) *frames {
		t.Helper()
		st, refused := ts.subscribe(t, doc, start, nil, func() {})
		if st == nil {
			t.Fatalf("refused: %+v", refused.Errors)
		}
		defer st.Close()
		out := &frames{keep: true}
		pumpAll(ts, st, out)
		return out
	}
	// The fast renderer, with the cursor selected.
	fast := pump(chunkDoc)
	var want []string
	for _, d := range fast.data {
		var ev struct{ MessageStream struct{ Cursor string } }
		if err := json.Unmarshal([]byte(d), &ev); err != nil || ev.MessageStream.Cursor == "" {
			t.Fatalf("%s: %v", d, err)
		}
		want = append(want, ev.MessageStream.Cursor)
	}
	if len(want) < 20 || !slices.Equal(fast.cursors, want) {
		t.Fatalf("Send was given the cursors\n%q\nwant the data's\n%q", fast.cursors, want)
	}
	// No cursor selected; the executor renders MessageAdded (toolCalls has no plan).
	bare := pump(`subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
		__typename ... on MessageAdded { message { toolCalls { id } } } ... on MessageChunk { delta } } }`)
	if !slices.Equal(bare.cursors, want) {
		t.Errorf("without the cursor selected, Send was given\n%q\nwant\n%q", bare.cursors, want)
	}
	if len(bare.data) == 0 || !strings.Contains(bare.data[0], `"toolCalls":[]`) || strings.Contains(strings.Join(bare.data, ""), `"cursor"`) {
		t.Errorf("data %q: want MessageAdded first, with its toolCalls, and no cursor", bare.data)
	}
}

// TestSubscribeFromResumesAfterItsCursorWhateverAfterSays: SubscribeFrom starts after its
// cursor, even when the operation's after is not a cursor at all, and refuses a cursor
// that is malformed or another session's with the errors after gets.
func TestSubscribeFromResumesAfterItsCursorWhateverAfterSays(t *testing.T) {
	ts := newTestServer(t, 20)
	start := ts.cursor(t)
	ts.reply(t)
	all := &frames{keep: true}
	st, _ := ts.subscribe(t, chunkDoc, start, nil, func() {})
	pumpAll(ts, st, all)
	st.Close()
	from := func(cursor, after string) (*Stream, *graphql.Response) {
		ctx := graphql.StartOperationTrace(ts.ctx)
		rc, errs := ts.exec.CreateOperationContext(ctx, &graphql.RawParams{Query: chunkDoc, Variables: map[string]any{"s": ts.sid, "a": after}})
		if errs != nil {
			t.Fatal(errs)
		}
		return SubscribeFrom(ctx, ts.exec, rc, cursor, func() {}, ts.log)
	}
	mid := len(all.cursors) / 2
	st, refused := from(all.cursors[mid], "not a cursor")
	if st == nil {
		t.Fatalf("refused: %+v", refused.Errors)
	}
	rest := &frames{keep: true}
	pumpAll(ts, st, rest)
	st.Close()
	if !slices.Equal(rest.cursors, all.cursors[mid+1:]) {
		t.Errorf("resumed after event %d: cursors\n%q\nwant\n%q", mid, rest.cursors, all.cursors[mid+1:])
	}
	other := newTestServer(t, 1)
	for cursor, says := range map[string]string{
		"not a cursor":             "invalid cursor",
		other.cursor(t):            "cursor belongs to another session",
		strings.Repeat("a", 1<<16): "invalid cursor",
	} {
		st, refused := from(cursor, start)
		if st != nil {
			st.Close()
			t.Errorf("%.20q: not refused", cursor)
			continue
		}
		// (The test's executor has no error presenter: the message is the error's text.)
		if len(refused.Errors) == 0 || !strings.HasSuffix(refused.Errors[0].Message, says) {
			t.Errorf("%.20q: refused with %+v, want %q", cursor, refused.Errors, says)
		}
	}
}

// TestPumpEndings: Pump stops when the Output says the subscription is over, and reports
// the session deleted and the server shutting down once the stream sent everything before.
func TestPumpEndings(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		ts := newTestServer(t, 10)
		start := ts.cursor(t)
		ts.reply(t)
		st, _ := ts.subscribe(t, chunkDoc, start, nil, func() {})
		defer st.Close()
		out := &frames{stop: 3}
		if state := st.Pump(ts.ctx, out); state != StreamIdle || out.sent != 3 {
			t.Errorf("%v after %d events, want idle after 3", state, out.sent)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		ts := newTestServer(t, 10)
		start := ts.cursor(t)
		ts.reply(t)
		st, _ := ts.subscribe(t, chunkDoc, start, nil, func() {})
		defer st.Close()
		if err := ts.svc.DeleteTalkSession(ts.ctx, ts.sid); err != nil {
			t.Fatal(err)
		}
		out := &frames{}
		if state := pumpAll(ts, st, out); state != StreamDeleted {
			t.Errorf("%v after %d events, want deleted", state, out.sent)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		ts := newTestServer(t, 10)
		start := ts.cursor(t)
		ts.reply(t)
		st, _ := ts.subscribe(t, chunkDoc, start, nil, func() {})
		defer st.Close()
		ts.svc.Close() // folds the reply's chunks (see service.Store.Compact)
		out := &frames{keep: true}
		state := pumpAll(ts, st, out)
		if state != StreamShutDown || out.sent == 0 || !strings.Contains(out.data[out.sent-1], `"COMPLETED"`) {
			t.Errorf("%v after %d events (%q), want shut down after the run's end", state, out.sent, out.data)
		}
	})
}

// pumpAll pumps st until it is not StreamMore.
func pumpAll(ts *testServer, st *Stream, out Output) StreamState {
	for {
		if state := st.Pump(ts.ctx, out); state != StreamMore {
			return state
		}
	}
}

// TestRefusedSubscriptionsGetTheExecutorsErrors: a subscription the resolver refuses
// gets no Stream, and the errors to answer with.
func TestRefusedSubscriptionsGetTheExecutorsErrors(t *testing.T) {
	ts := newTestServer(t, 1)
	st, refused := ts.subscribe(t, chunkDoc, "not a cursor", nil, func() {})
	if st != nil || refused == nil || len(refused.Errors) == 0 {
		t.Fatalf("stream %v, answer %+v", st, refused)
	}
	if code := refused.Errors[0].Extensions["code"]; code != nil && code != "BAD_USER_INPUT" {
		t.Errorf("code %v", code)
	}
}

// BenchmarkPump sends the chunks of a long reply through a stream and the app's
// subscription document: what each event costs between the log and a websocket frame
// (reading it, its GraphQL type, the fast renderer, the frame). ns/op and allocs/op are
// per event.
func BenchmarkPump(b *testing.B) {
	ts := newTestServer(b, 1000)
	start := ts.cursor(b)
	ts.reply(b)
	out := &frames{}
	events := 0
	b.ReportAllocs()
	b.ResetTimer()
	for events < b.N {
		b.StopTimer()
		st, refused := ts.subscribe(b, streamQuery, start, nil, func() {})
		if st == nil {
			b.Fatalf("refused: %+v", refused.Errors)
		}
		out.sent = 0
		b.StartTimer()
		for st.Pump(ts.ctx, out) == StreamMore && events+out.sent < b.N {
		}
		b.StopTimer()
		events += out.sent
		st.Close()
		b.StartTimer()
	}
}

// streamQuery is the load generator's subscription (cmd/talkgraph-load).
const streamQuery = `subscription($s: ID!, $a: String) { messageStream(sessionId: $s, after: $a) { __typename cursor ... on MessageAdded { message { id role status } } ... on MessageChunk { messageId delta offset } ... on MessageCompleted { message { id role status content } } ... on RunStatusChanged { run { id status } } } }`

// TestWithoutAStreamTheSubscriptionIsRefused: executed by a transport that drives no
// Stream (gqlgen's own), the subscription is refused rather than left hanging.
func TestWithoutAStreamTheSubscriptionIsRefused(t *testing.T) {
	ts := newTestServer(t, 1)
	ctx := graphql.StartOperationTrace(ts.ctx)
	rc, errs := ts.exec.CreateOperationContext(ctx, &graphql.RawParams{Query: chunkDoc, Variables: map[string]any{"s": ts.sid}})
	if errs != nil {
		t.Fatal(errs)
	}
	responses, rctx := ts.exec.DispatchOperation(ctx, rc)
	if resp := responses(rctx); resp == nil || len(resp.Errors) == 0 {
		t.Fatalf("answered %+v", resp)
	}
	if got := ts.svc.Stats().Subscriptions; got != 0 {
		t.Errorf("%d subscriptions open", got)
	}
}
