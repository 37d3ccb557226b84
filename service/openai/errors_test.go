package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// wantFailure checks that err fails the run with a user message containing msg.
func wantFailure(t *testing.T, err error, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Run succeeded, want a failure saying %q", msg)
	}
	if got := service.ErrorMessage(err); !strings.Contains(got, msg) {
		t.Errorf("ErrorMessage = %q, want it to contain %q (err: %v)", got, msg, err)
	}
	if got := service.ErrorCode(err); got != service.EUNAVAILABLE {
		t.Errorf("ErrorCode = %q, want %q", got, service.EUNAVAILABLE)
	}
}

func TestUnauthorized(t *testing.T) {
	srv := newFakeServer(t, fakellm.ErrorReply(401, `{"error":{"message":"Incorrect API key provided: `+testKey+`.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`))
	a := newAgent(t, srv, openai.Config{})
	err := run(t, a, userSays("hi"), newRecorder())
	wantFailure(t, err, "the model provider refused the API key")
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1 (no retry)", n)
	}
}

func TestRetryAfter429(t *testing.T) {
	srv := newFakeServer(t,
		fakellm.ErrorReply(429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After", "1"),
		fakellm.TextReply("Hello."),
	)
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	if err := run(t, a, userSays("hi"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if gap := reqs[1].At.Sub(reqs[0].At); gap < 900*time.Millisecond {
		t.Errorf("retried after %v, before the Retry-After of 1s", gap)
	}
	equal(t, "deltas", out.deltas, []string{"Hello."})
}

func TestRetry500(t *testing.T) {
	srv := newFakeServer(t,
		fakellm.ErrorReply(500, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`),
		fakellm.ErrorReply(503, `<html>Service Unavailable</html>`),
		fakellm.TextReply("Back."),
	)
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	if err := run(t, a, userSays("hi"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	equal(t, "deltas", out.deltas, []string{"Back."})
}

func TestRetriesGiveUp(t *testing.T) {
	t.Run("AfterMaxRetries", func(t *testing.T) {
		limited := fakellm.ErrorReply(429, `{"error":{"message":"slow down"}}`, "Retry-After", "0")
		srv := newFakeServer(t, limited, limited, limited)
		a := newAgent(t, srv, openai.Config{MaxRetries: 1})
		wantFailure(t, run(t, a, userSays("hi"), newRecorder()), "rate limiting")
		if n := len(srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
	})
	t.Run("WhenRetryAfterIsTooLong", func(t *testing.T) {
		srv := newFakeServer(t, fakellm.ErrorReply(429, `{}`, "Retry-After", "3600"), fakellm.TextReply("no"))
		a := newAgent(t, srv, openai.Config{})
		start := time.Now()
		wantFailure(t, run(t, a, userSays("hi"), newRecorder()), "rate limiting")
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("gave up after %v", d)
		}
	})
	t.Run("NotOnBadRequest", func(t *testing.T) {
		srv := newFakeServer(t, fakellm.ErrorReply(400, `{"error":{"message":"'messages' must contain the word 'json'","type":"invalid_request_error"}}`))
		a := newAgent(t, srv, openai.Config{})
		wantFailure(t, run(t, a, userSays("hi"), newRecorder()), "rejected the request (HTTP 400): 'messages' must contain the word 'json'")
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
	t.Run("OllamaModelNotFound", func(t *testing.T) {
		srv := newFakeServer(t, fakellm.ErrorReply(404, `{"error":"model \"llama9\" not found, try pulling it first"}`))
		a := newAgent(t, srv, openai.Config{})
		wantFailure(t, run(t, a, userSays("hi"), newRecorder()), `model "llama9" not found`)
	})
}

// Once text reached the user, a retry could show it twice: the run fails instead.
func TestNoRetryOnceTextWasStreamed(t *testing.T) {
	srv := newFakeServer(t,
		func(w http.ResponseWriter, r *http.Request) {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Chunk(fakellm.TextDelta("Half a"), ""))
			// Drop the connection mid-stream.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
		},
		fakellm.TextReply("never sent"),
	)
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	wantFailure(t, run(t, a, userSays("hi"), out), "the connection to the model provider was lost")
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if got := out.text(); got != "Half a" {
		t.Errorf("text = %q", got)
	}
}

// A connection lost before anything was streamed is retried.
func TestRetryLostConnectionBeforeText(t *testing.T) {
	srv := newFakeServer(t,
		func(w http.ResponseWriter, r *http.Request) {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""))
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		},
		fakellm.TextReply("Second try."),
	)
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	if err := run(t, a, userSays("hi"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "deltas", out.deltas, []string{"Second try."})
}

func TestMalformedStream(t *testing.T) {
	srv := newFakeServer(t, fakellm.SSE(
		fakellm.Chunk(fakellm.RoleDelta, ""),
		fakellm.Chunk(fakellm.TextDelta("Hi"), ""),
		fakellm.Data(`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"oops"`),
		fakellm.Done,
	))
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	wantFailure(t, run(t, a, userSays("hi"), out), "the model provider sent a malformed reply")
	if got := out.text(); got != "Hi" {
		t.Errorf("text = %q, want the part before the bad chunk", got)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestStreamErrorEvent(t *testing.T) {
	srv := newFakeServer(t, fakellm.SSE(
		fakellm.Chunk(fakellm.RoleDelta, ""),
		fakellm.Data(`{"error":{"message":"The model is overloaded.","type":"server_error"}}`),
	))
	a := newAgent(t, srv, openai.Config{})
	wantFailure(t, run(t, a, userSays("hi"), newRecorder()), "the model provider reported an error: The model is overloaded.")
}

func TestMissingFinishReason(t *testing.T) {
	for _, tt := range []struct {
		name   string
		events []string
	}{
		{"WithDone", []string{fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Chunk(fakellm.TextDelta("The answer is"), ""), fakellm.Done}},
		{"WithoutDone", []string{fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Chunk(fakellm.TextDelta("The answer is"), "")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, fakellm.SSE(tt.events...))
			a := newAgent(t, srv, openai.Config{})
			out := newRecorder()
			wantFailure(t, run(t, a, userSays("hi"), out), "the model's reply was cut off")
			if got := out.text(); got != "The answer is" {
				t.Errorf("text = %q", got)
			}
		})
	}
}

// A server that holds the stream open without a byte is abandoned after IdleTimeout.
func TestStall(t *testing.T) {
	var srv *fakellm.Server
	srv = newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Chunk(fakellm.TextDelta("Thinking"), ""))
		select {
		case <-r.Context().Done():
		case <-srv.Quit():
		}
	})
	a := newAgent(t, srv, openai.Config{IdleTimeout: 300 * time.Millisecond})
	out := newRecorder()
	wantFailure(t, run(t, a, userSays("hi"), out), "the model provider stopped responding")
	waitClosed(t, srv.Request(0).Done, "the server to see the request end")
	if got := out.text(); got != "Thinking" {
		t.Errorf("text = %q", got)
	}
}

// A stall before the response headers counts too.
func TestStallBeforeHeaders(t *testing.T) {
	var srv *fakellm.Server
	srv = newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-srv.Quit():
		}
	})
	a := newAgent(t, srv, openai.Config{IdleTimeout: 300 * time.Millisecond, MaxRetries: -1})
	wantFailure(t, run(t, a, userSays("hi"), newRecorder()), "the model provider stopped responding")
}

// Stop cancels the run's context: the HTTP stream closes at once, the text streamed so
// far stays with the service, and Run returns ctx's error.
func TestStopDuringStream(t *testing.T) {
	var srv *fakellm.Server
	srv = newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Chunk(fakellm.TextDelta("Once upon"), ""))
		select {
		case <-r.Context().Done():
		case <-srv.Quit():
		}
	})
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := runAsync(ctx, a, service.RunRequest{History: userSays("a story")}, out)

	out.waitFor(t, "the first text", func() bool { return len(out.deltas) > 0 })
	cancel()
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	waitClosed(t, srv.Request(0).Done, "the server to see the request end")
	if got := out.text(); got != "Once upon" {
		t.Errorf("text = %q", got)
	}
}

func TestStopWhileAsking(t *testing.T) {
	srv := newFakeServer(t, fakellm.SSE(
		fakellm.Chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_q","type":"function","function":{"name":"ask_user","arguments":"{\"question\":\"Sure?\"}"}}]}`, ""),
		fakellm.Chunk(`{}`, "tool_calls"),
		fakellm.Done,
	))
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder() // never answers
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := runAsync(ctx, a, service.RunRequest{History: userSays("delete it")}, out)
	out.waitFor(t, "the question", func() bool { return len(out.asks) == 1 })
	cancel()
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

// Whatever way the provider fails, the API key shows in no error, log text or output,
// even when the server echoes it back.
func TestAPIKeyNeverLeaks(t *testing.T) {
	echo := `{"error":{"message":"bad key ` + testKey + `","type":"` + testKey + `"}}`
	hold := func(srv **fakellm.Server) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""))
			select {
			case <-r.Context().Done():
			case <-(*srv).Quit():
			}
		}
	}
	hijack := func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	}
	cases := map[string][]http.HandlerFunc{
		"401":               {fakellm.ErrorReply(401, echo)},
		"403":               {fakellm.ErrorReply(403, echo)},
		"400":               {fakellm.ErrorReply(400, echo)},
		"404":               {fakellm.ErrorReply(404, `{"error":"`+testKey+`"}`)},
		"422":               {fakellm.ErrorReply(422, `{"detail":"`+testKey+`"}`)},
		"429":               {fakellm.ErrorReply(429, echo, "Retry-After", "0"), fakellm.ErrorReply(429, echo, "Retry-After", "0"), fakellm.ErrorReply(429, echo, "Retry-After", "0")},
		"500":               {fakellm.ErrorReply(500, echo, "Retry-After", "0"), fakellm.ErrorReply(502, testKey, "Retry-After", "0"), fakellm.ErrorReply(503, echo, "Retry-After", "0")},
		"ErrorEvent":        {fakellm.SSE(fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Data(echo))},
		"MalformedChunk":    {fakellm.SSE(fakellm.Data(`{"choices":[{"delta":{"content":"` + testKey))},
		"NoFinishReason":    {fakellm.SSE(fakellm.Chunk(fakellm.TextDelta("x"), ""), fakellm.Done)},
		"ConnectionDropped": {hijack, hijack, hijack},
		"Stall":             nil, // filled below: needs the server
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			var srv *fakellm.Server
			if name == "Stall" {
				script = []http.HandlerFunc{hold(&srv)}
			}
			srv = newFakeServer(t, script...)
			a := newAgent(t, srv, openai.Config{IdleTimeout: 300 * time.Millisecond})
			out := newRecorder()
			err := run(t, a, userSays("hi"), out)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			for what, s := range map[string]string{
				"Error()":      err.Error(),
				"%+v":          fmt.Sprintf("%+v", err),
				"%#v":          fmt.Sprintf("%#v", err),
				"ErrorMessage": service.ErrorMessage(err),
				"output":       out.text(),
			} {
				if strings.Contains(s, testKey) {
					t.Errorf("%s contains the API key: %s", what, s)
				}
			}
			for e := err; e != nil; e = errors.Unwrap(e) {
				if strings.Contains(e.Error(), testKey) {
					t.Errorf("wrapped error contains the API key: %v", e)
				}
			}
		})
	}

	t.Run("Unreachable", func(t *testing.T) {
		// The key in the URL, as some proxies want it, must not leak through the
		// transport's error either.
		a, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1?key=" + testKey, APIKey: testKey, Model: "m", MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Run(context.Background(), service.RunRequest{History: userSays("hi")}, newRecorder())
		wantFailure(t, err, "could not reach the model provider")
		if strings.Contains(err.Error(), testKey) || strings.Contains(fmt.Sprintf("%+v", err), testKey) {
			t.Errorf("error contains the API key: %v", err)
		}
	})
	t.Run("BadBaseURL", func(t *testing.T) {
		_, err := openai.New(openai.Config{BaseURL: "::" + testKey, APIKey: testKey})
		if err == nil || strings.Contains(err.Error(), testKey) {
			t.Errorf("New = %v", err)
		}
	})
}

// A provider (or a tool) that writes the key itself does not get it to the user: it is
// redacted from text, even split across deltas, from tool arguments, output and results.
func TestAPIKeyRedactedFromOutput(t *testing.T) {
	half := len(testKey) / 2
	srv := newFakeServer(t,
		fakellm.SSE(
			fakellm.Chunk(fakellm.RoleDelta, ""),
			fakellm.Chunk(fakellm.TextDelta("Your key is "+testKey[:half]), ""),
			fakellm.Chunk(fakellm.TextDelta(testKey[half:]+", yes"), ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"leaky","arguments":`+jsonString(`{"k":"`+testKey+`"}`)+`}}]}`, ""),
			fakellm.Chunk(`{}`, "tool_calls"),
			fakellm.Done,
		),
		fakellm.TextReply("s", "k", "ip it."),
	)
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{leakyTool{}}})
	out := newRecorder()
	if err := run(t, a, userSays("hi"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, want := out.text(), "Your key is [redacted], yesskip it."; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	c := out.toolCalls()[0]
	for what, s := range map[string]string{"args": c.args, "output": c.output.String(), "result": c.result} {
		if strings.Contains(s, testKey) || !strings.Contains(s, "[redacted]") {
			t.Errorf("%s = %q", what, s)
		}
	}
}

// leakyTool prints and returns the key it is given, in pieces.
type leakyTool struct{}

func (leakyTool) Name() string               { return "leaky" }
func (leakyTool) Description() string        { return "" }
func (leakyTool) Parameters() map[string]any { return nil }
func (leakyTool) Call(_ context.Context, args string, out openai.ToolOutput) (string, error) {
	for _, r := range testKey {
		_ = out.Output(string(r))
	}
	return "result " + testKey, nil
}
