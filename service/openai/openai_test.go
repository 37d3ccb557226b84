package openai_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

func ptr[T any](v T) *T { return &v }

func TestRunStreamsTextAndSendsSettings(t *testing.T) {
	tests := []struct {
		name      string
		cfg       openai.Config
		settings  service.Settings
		wantModel string
		wantTemp  *float64
		wantFirst string // the first message
	}{
		{
			name:      "SessionSettingsOverrideConfig",
			cfg:       openai.Config{Model: "cfg-model", Temperature: ptr(0.2), SystemPrompt: "cfg prompt"},
			settings:  service.Settings{Model: ptr("session-model"), Temperature: ptr(0.7), SystemPrompt: ptr("be brief")},
			wantModel: "session-model", wantTemp: ptr(0.7), wantFirst: "system: be brief",
		},
		{
			name:      "ConfigIsTheDefault",
			cfg:       openai.Config{Model: "cfg-model", Temperature: ptr(0.2), SystemPrompt: "cfg prompt"},
			settings:  service.Settings{Model: ptr(""), SystemPrompt: ptr("")},
			wantModel: "cfg-model", wantTemp: ptr(0.2), wantFirst: "system: cfg prompt",
		},
		{
			name:      "NoTemperatureNoSystemPrompt",
			cfg:       openai.Config{Model: "cfg-model"},
			wantModel: "cfg-model", wantFirst: "user: hi",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, fakellm.TextReply("Hel", "lo", ", wor", "ld"))
			a := newAgent(t, srv, tt.cfg)
			out := newRecorder()
			err := a.Run(context.Background(), service.RunRequest{Settings: tt.settings, History: userSays("hi")}, out)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			equal(t, "deltas", out.deltas, []string{"Hel", "lo", ", wor", "ld"})

			got := srv.Request(0)
			if got.Path != "/v1/chat/completions" {
				t.Errorf("path = %q", got.Path)
			}
			if got, want := got.Header.Get("Authorization"), "Bearer "+testKey; got != want {
				t.Errorf("Authorization = %q, want %q", got, want)
			}
			if got.Body.Model != tt.wantModel {
				t.Errorf("model = %q, want %q", got.Body.Model, tt.wantModel)
			}
			switch {
			case tt.wantTemp == nil && got.Body.Temperature != nil:
				t.Errorf("temperature = %v, want none", *got.Body.Temperature)
			case tt.wantTemp != nil && (got.Body.Temperature == nil || *got.Body.Temperature != *tt.wantTemp):
				t.Errorf("temperature = %v, want %v", got.Body.Temperature, *tt.wantTemp)
			}
			if !got.Body.Stream {
				t.Error("stream is not true")
			}
			if tr := got.Transcript(); len(tr) == 0 || tr[0] != tt.wantFirst || tr[len(tr)-1] != "user: hi" {
				t.Errorf("messages = %q", tr)
			}
			equal(t, "tools", got.ToolNames(), []string{"ask_user"})
		})
	}
}

// The agent asks for usage in the stream and reports it, by the model it asked for.
func TestUsageIsReported(t *testing.T) {
	srv := newFakeServer(t, fakellm.TextReply("a", "b", "c"))
	a := newAgent(t, srv, openai.Config{Model: "cfg-model"})
	out := newRecorder()
	if err := a.Run(context.Background(), service.RunRequest{History: userSays("hi")}, out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(srv.Request(0).Raw, `"include_usage":true`) {
		t.Errorf("the request does not ask for usage: %s", srv.Request(0).Raw)
	}
	if len(out.usage) != 1 {
		t.Fatalf("usage reported %d times, want once", len(out.usage))
	}
	u := out.usage[0]
	if u.model != "cfg-model" || u.usage.InputTokens != 20 || u.usage.OutputTokens != 3 || u.usage.CachedInputTokens == nil || *u.usage.CachedInputTokens != 5 {
		t.Errorf("usage = %+v (cached %v), want cfg-model 20 in (5 cached), 3 out", u, u.usage.CachedInputTokens)
	}
}

// OpenAI streams a tool call's ID and name once, then its arguments in fragments.
func TestToolCallArgumentsInFragments(t *testing.T) {
	srv := newFakeServer(t,
		fakellm.SSE(
			fakellm.Chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_Qx1","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"city"}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"Paris"}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]}`, ""),
			fakellm.Chunk(`{}`, "tool_calls"),
			fakellm.Done,
		),
		fakellm.TextReply("Clear skies ", "in Paris."),
	)
	weather := &weatherTool{}
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{weather}})
	out := newRecorder()
	if err := run(t, a, userSays("Weather in Paris?"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}

	equal(t, "tool received", weather.received(), []string{`{"city":"Paris"}`})
	calls := out.toolCalls()
	if len(calls) != 1 {
		t.Fatalf("%d tool calls reported, want 1", len(calls))
	}
	c := calls[0]
	if c.id != "call_Qx1" || c.name != "get_weather" || c.args != `{"city":"Paris"}` {
		t.Errorf("reported call = %q %q %q", c.id, c.name, c.args)
	}
	if got := c.output.String(); got != "looking up Paris\n" {
		t.Errorf("tool output = %q", got)
	}
	if !c.finished || c.err != nil || c.result != `{"city":"Paris","sky":"clear"}` {
		t.Errorf("finish = %v %q %v", c.finished, c.result, c.err)
	}
	if got := out.text(); got != "Clear skies in Paris." {
		t.Errorf("text = %q", got)
	}

	first := srv.Request(0)
	equal(t, "tools offered", first.ToolNames(), []string{"ask_user", "get_weather"})
	if p := first.Body.Tools[1].Function; p.Description != "Current weather in a city." || p.Parameters["required"] == nil {
		t.Errorf("get_weather offered as %+v", p)
	}
	equal(t, "second request", srv.Request(1).Transcript(), []string{
		"user: Weather in Paris?",
		`assistant: [call_Qx1 get_weather {"city":"Paris"}]`,
		`tool call_Qx1: {"city":"Paris","sky":"clear"}`,
	})
}

// Ollama sends a tool call whole in one chunk, and has been seen ending with "stop".
func TestToolCallWholeInOneChunk(t *testing.T) {
	ollama := func(delta, finish string) string {
		fr := "null"
		if finish != "" {
			fr = `"` + finish + `"`
		}
		return `{"id":"chatcmpl-271","object":"chat.completion.chunk","created":1730000000,"model":"llama3.2",` +
			`"system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}`
	}
	srv := newFakeServer(t,
		fakellm.SSE(
			fakellm.Data(ollama(`{"role":"assistant","content":"","tool_calls":[{"id":"call_f3k9x2","index":0,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}`, "")),
			fakellm.Data(ollama(`{"role":"assistant","content":""}`, "stop")),
			fakellm.Done,
		),
		fakellm.SSE(
			fakellm.Data(ollama(`{"role":"assistant","content":"Snow in Oslo."}`, "")),
			fakellm.Data(ollama(`{"role":"assistant","content":""}`, "stop")),
			fakellm.Done,
		),
	)
	weather := &weatherTool{}
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{weather}})
	out := newRecorder()
	if err := run(t, a, userSays("Oslo?"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "tool received", weather.received(), []string{`{"city":"Oslo"}`})
	equal(t, "second request", srv.Request(1).Transcript(), []string{
		"user: Oslo?",
		`assistant: [call_f3k9x2 get_weather {"city":"Oslo"}]`,
		`tool call_f3k9x2: {"city":"Oslo","sky":"clear"}`,
	})
	if got := out.text(); got != "Snow in Oslo." {
		t.Errorf("text = %q", got)
	}
}

// vLLM repeats the tool call's ID (and type) in every fragment.
func TestToolCallRepeatedID(t *testing.T) {
	frag := func(fn string) string {
		return fakellm.Chunk(`{"tool_calls":[{"id":"chatcmpl-tool-5c1e","type":"function","index":0,"function":`+fn+`}]}`, "")
	}
	srv := newFakeServer(t,
		fakellm.SSE(
			fakellm.Chunk(`{"role":"assistant","content":""}`, ""),
			frag(`{"name":"get_weather"}`),
			frag(`{"arguments":"{\"city\": "}`),
			frag(`{"arguments":"\"Lima\""}`),
			frag(`{"arguments":"}"}`),
			fakellm.Chunk(`{"content":""}`, "tool_calls"),
			fakellm.Done,
		),
		fakellm.TextReply("Sunny."),
	)
	weather := &weatherTool{}
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{weather}})
	out := newRecorder()
	if err := run(t, a, userSays("Lima?"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "tool received", weather.received(), []string{`{"city": "Lima"}`})
	if n := len(out.toolCalls()); n != 1 {
		t.Errorf("%d calls reported, want 1", n)
	}
	equal(t, "second request", srv.Request(1).Transcript(), []string{
		"user: Lima?",
		`assistant: [chatcmpl-tool-5c1e get_weather {"city": "Lima"}]`,
		`tool chatcmpl-tool-5c1e: {"city":"Lima","sky":"clear"}`,
	})
}

// Two calls in one response run one after the other, and each is answered. The first is
// reported while the model is still writing the second. The service's own IDs are used
// with the model.
func TestParallelToolCalls(t *testing.T) {
	firstShown := make(chan struct{})
	var srv *fakellm.Server
	srv = newFakeServer(t,
		func(w http.ResponseWriter, r *http.Request) {
			fakellm.WriteSSE(w,
				fakellm.Chunk(`{"role":"assistant","content":"Checking both.","tool_calls":[{"index":0,"id":"call_A","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
				fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Rome\"}"}}]}`, ""),
				fakellm.Chunk(`{"tool_calls":[{"index":1,"id":"call_B","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
			)
			select {
			case <-firstShown:
			case <-srv.Quit():
				return
			}
			fakellm.WriteSSE(w,
				fakellm.Chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":\"Nice\"}"}}]}`, ""),
				fakellm.Chunk(`{}`, "tool_calls"),
				fakellm.Done,
			)
		},
		fakellm.TextReply("Both clear."),
	)
	weather := &weatherTool{}
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{weather}})
	out := newRecorder()
	out.idPrefix = "svc-"
	errc := runAsync(context.Background(), a, service.RunRequest{History: userSays("Rome and Nice?")}, out)

	out.waitFor(t, "the first call to be reported mid-stream", func() bool { return len(out.tools) == 1 })
	close(firstShown)
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Run: %v", err)
	}

	equal(t, "tool calls in order", weather.received(), []string{`{"city":"Rome"}`, `{"city":"Nice"}`})
	for _, c := range out.toolCalls() {
		if !c.finished || c.err != nil {
			t.Errorf("call %s: finished=%v err=%v", c.id, c.finished, c.err)
		}
	}
	// The model gets its own call IDs back, not the service's.
	equal(t, "second request", srv.Request(1).Transcript(), []string{
		"user: Rome and Nice?",
		`assistant: Checking both. [call_A get_weather {"city":"Rome"}] [call_B get_weather {"city":"Nice"}]`,
		`tool call_A: {"city":"Rome","sky":"clear"}`,
		`tool call_B: {"city":"Nice","sky":"clear"}`,
	})
	if got := out.text(); got != "Checking both.Both clear." {
		t.Errorf("text = %q", got)
	}
}

// Keep-alive comment lines are not chunks, and they keep an idle stream alive.
func TestKeepAliveComments(t *testing.T) {
	var srv *fakellm.Server
	srv = newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, ping, fakellm.Chunk(fakellm.RoleDelta, ""), ping, fakellm.Chunk(fakellm.TextDelta("Still "), ""))
		// Silent but for pings for longer than the idle timeout.
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range 20 {
			select {
			case <-tick.C:
				fakellm.WriteSSE(w, ping)
			case <-srv.Quit():
				return
			}
		}
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.TextDelta("here."), ""), ping, fakellm.Chunk(`{}`, "stop"), ping, fakellm.Done)
	})
	a := newAgent(t, srv, openai.Config{IdleTimeout: 500 * time.Millisecond})
	out := newRecorder()
	if err := run(t, a, userSays("hi"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := out.text(); got != "Still here." {
		t.Errorf("text = %q", got)
	}
}

func TestAskUser(t *testing.T) {
	srv := newFakeServer(t,
		fakellm.SSE(
			fakellm.Chunk(`{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"call_ask","type":"function","function":{"name":"ask_user","arguments":""}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"question\":\"Which city?\",\"choices\":[\"Paris\",\"Rome\"]}"}}]}`, ""),
			fakellm.Chunk(`{}`, "tool_calls"),
			fakellm.Done,
		),
		fakellm.TextReply("Rome it is."),
	)
	a := newAgent(t, srv, openai.Config{})
	out := newRecorder()
	out.answer = func(prompt string, choices []string) (string, error) { return "Rome", nil }
	if err := run(t, a, userSays("Book me a trip"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}

	if len(out.asks) != 1 || out.asks[0].prompt != "Which city?" || len(out.asks[0].choices) != 2 || out.asks[0].choices[1] != "Rome" {
		t.Errorf("asked %+v", out.asks)
	}
	calls := out.toolCalls()
	if len(calls) != 1 || calls[0].name != "ask_user" || calls[0].result != "Rome" || !calls[0].finished {
		t.Errorf("reported calls %+v", calls)
	}
	equal(t, "second request", srv.Request(1).Transcript(), []string{
		"user: Book me a trip",
		`assistant: [call_ask ask_user {"question":"Which city?","choices":["Paris","Rome"]}]`,
		"tool call_ask: Rome",
	})
}

// Calls of unknown tools, failing tools and bad ask_user arguments are answered with an
// error the model can read, and the run goes on.
func TestToolErrorsGoBackToTheModel(t *testing.T) {
	srv := newFakeServer(t,
		fakellm.SSE(
			fakellm.Chunk(`{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Bern\"}"}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"no_such_tool","arguments":"{}"}}]}`, ""),
			fakellm.Chunk(`{"tool_calls":[{"index":2,"id":"c3","type":"function","function":{"name":"ask_user","arguments":"{\"choices\":[]}"}}]}`, ""),
			fakellm.Chunk(`{}`, "tool_calls"),
			fakellm.Done,
		),
		fakellm.TextReply("Sorry."),
	)
	weather := &weatherTool{fail: errors.New("weather service down")}
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{weather}})
	out := newRecorder()
	if err := run(t, a, userSays("Bern?"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "second request", srv.Request(1).Transcript()[2:], []string{
		"tool c1: error: weather service down",
		`tool c2: error: there is no tool named "no_such_tool"`,
		`tool c3: error: "question" is required`,
	})
	for _, c := range out.toolCalls() {
		if !c.finished || c.err == nil {
			t.Errorf("call %s: finished=%v err=%v, want a failure", c.id, c.finished, c.err)
		}
	}
	if len(out.asks) != 0 {
		t.Errorf("asked %+v with bad arguments", out.asks)
	}
}

func TestNoModel(t *testing.T) {
	a, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background(), service.RunRequest{History: userSays("hi")}, newRecorder())
	if service.ErrorCode(err) != service.EINVALID {
		t.Errorf("err = %v, want EINVALID", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  openai.Config
	}{
		{"BaseURLNotHTTP", openai.Config{BaseURL: "ftp://example.com/v1"}},
		{"BaseURLWithoutHost", openai.Config{BaseURL: "http:///v1"}},
		{"NilTool", openai.Config{Tools: []openai.Tool{nil}}},
		{"DuplicateTool", openai.Config{Tools: []openai.Tool{&weatherTool{}, &weatherTool{}}}},
		{"ToolNamedAskUser", openai.Config{Tools: []openai.Tool{namedTool("ask_user")}}},
		{"ToolNamedShellWithShell", openai.Config{EnableShell: true, Tools: []openai.Tool{namedTool("shell")}}},
		{"BadToolName", openai.Config{Tools: []openai.Tool{namedTool("get weather")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := openai.New(tt.cfg); err == nil {
				t.Error("New succeeded")
			}
		})
	}
	if _, err := openai.New(openai.Config{Tools: []openai.Tool{namedTool("shell")}}); err != nil {
		t.Errorf("a tool named shell without the built-in shell: %v", err)
	}
}

type namedTool string

func (n namedTool) Name() string             { return string(n) }
func (namedTool) Description() string        { return "" }
func (namedTool) Parameters() map[string]any { return nil }
func (namedTool) Call(context.Context, string, openai.ToolOutput) (string, error) {
	return "", nil
}

// TestSteersReachTheModelBeforeItsNextCall: what the user steered the run with goes to
// the model as user messages before its next call, after the tool results; when the
// model had finished its reply, it goes on with the steer.
func TestSteersReachTheModelBeforeItsNextCall(t *testing.T) {
	t.Run("after tool results", func(t *testing.T) {
		srv := newFakeServer(t,
			fakellm.SSE(
				fakellm.Chunk(`{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Bern\"}"}}]}`, ""),
				fakellm.Chunk(`{}`, "tool_calls"),
				fakellm.Done,
			),
			fakellm.TextReply("20 degrees Celsius."),
		)
		a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{&weatherTool{}}})
		out := newRecorder()
		out.steer("in Celsius, please")
		if err := run(t, a, userSays("Bern?"), out); err != nil {
			t.Fatalf("Run: %v", err)
		}
		tr := srv.Request(1).Transcript()
		equal(t, "the second request ends", tr[len(tr)-2:], []string{`tool c1: {"city":"Bern","sky":"clear"}`, "user: in Celsius, please"})
	})
	t.Run("after a finished reply", func(t *testing.T) {
		srv := newFakeServer(t, fakellm.TextReply("It is sunny."), fakellm.TextReply("20 degrees Celsius."))
		a := newAgent(t, srv, openai.Config{})
		out := newRecorder()
		out.steer("in Celsius, please")
		if err := run(t, a, userSays("Bern?"), out); err != nil {
			t.Fatalf("Run: %v", err)
		}
		tr := srv.Request(1).Transcript()
		equal(t, "the second request ends", tr[len(tr)-2:], []string{"assistant: It is sunny.", "user: in Celsius, please"})
		if got := strings.Join(out.deltas, ""); got != "It is sunny.20 degrees Celsius." {
			t.Errorf("streamed %q", got)
		}
	})
}
