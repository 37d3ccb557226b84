package fakellm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/talkgraph/talkgraph/internal/fakellm"
)

// failures is a testing.TB that records the failures it is told of instead of failing.
type failures struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *failures) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.errs)
}

func post(t *testing.T, url, body string) (status int, contentType, reply string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestScriptAndRecord(t *testing.T) {
	s := fakellm.New(t, fakellm.TextReply("Hel", "lo"))
	body := `{"model":"m","temperature":0.5,"stream":true,"messages":[` +
		`{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"Hel"},{"type":"text","text":"lo"},{"type":"image_url","image_url":{"url":"x"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ask_user","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"Rome"},` +
		`{"role":"assistant","content":""},` +
		`{"role":"assistant"}],` +
		`"tools":[{"type":"function","function":{"name":"ask_user","description":"d","parameters":{"type":"object"}}}]}`
	status, ct, reply := post(t, s.URL+fakellm.Path, body)
	if status != http.StatusOK || ct != "text/event-stream" {
		t.Errorf("reply: %d %s", status, ct)
	}
	want := fakellm.Chunk(fakellm.RoleDelta, "") + fakellm.Chunk(`{"content":"Hel"}`, "") +
		fakellm.Chunk(`{"content":"lo"}`, "") + fakellm.Chunk(`{}`, "stop") + "data: [DONE]\n\n"
	if reply != want {
		t.Errorf("stream:\n%s\nwant:\n%s", reply, want)
	}
	for _, ev := range strings.Split(strings.TrimSuffix(reply, "\n\n"), "\n\n") {
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok || (payload != "[DONE]" && !json.Valid([]byte(payload))) {
			t.Errorf("bad event %q", ev)
		}
	}

	r := s.Request(0)
	if r.Path != fakellm.Path || r.Raw != body || r.Body.Model != "m" || r.Body.Temperature == nil ||
		*r.Body.Temperature != 0.5 || !r.Body.Stream || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("recorded %+v", r)
	}
	wantLines := []string{
		"system: be brief",
		`user: ["Hel" "lo" <image_url>]`,
		"assistant: [call_1 ask_user {}]",
		"tool call_1: Rome",
		"assistant: ",
		"assistant:",
	}
	if got := r.Transcript(); !slices.Equal(got, wantLines) {
		t.Errorf("transcript:\n got: %q\nwant: %q", got, wantLines)
	}
	if got := r.Body.Messages[1].Text(); got != "Hello" {
		t.Errorf("parts as text = %q", got)
	}
	if got := r.ToolNames(); !slices.Equal(got, []string{"ask_user"}) || r.Body.Tools[0].Function.Description != "d" {
		t.Errorf("tools = %q %+v", got, r.Body.Tools)
	}
	<-r.Done
}

func TestPastScript(t *testing.T) {
	for _, tt := range []struct {
		name   string
		past   http.HandlerFunc
		status int
	}{
		{"Default", nil, http.StatusBadRequest},
		{"ServerError", fakellm.UnscriptedServerError, http.StatusInternalServerError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ft := &failures{TB: t}
			s := fakellm.New(ft, fakellm.ErrorReply(http.StatusTooManyRequests, `{}`, "Retry-After", "1"))
			if tt.past != nil {
				s.PastScript(tt.past)
			}
			if status, _, _ := post(t, s.URL+fakellm.Path, `{"messages":[]}`); status != http.StatusTooManyRequests {
				t.Errorf("scripted reply: %d", status)
			}
			if errs := ft.got(); len(errs) != 0 {
				t.Errorf("failures after a scripted request: %q", errs)
			}
			status, ct, _ := post(t, s.URL+fakellm.Path, `{"messages":[{"role":"user","content":"again"}]}`)
			if status != tt.status || ct != "application/json" {
				t.Errorf("reply past the script: %d %s, want %d", status, ct, tt.status)
			}
			if errs := ft.got(); len(errs) != 1 || !strings.Contains(errs[0], "unexpected request #2:\nuser: again") {
				t.Errorf("failures = %q, want one for the unexpected request", errs)
			}
			if n := len(s.Requests()); n != 2 {
				t.Errorf("%d requests recorded, want 2", n)
			}
		})
	}
}

func TestWrongPathOrBody(t *testing.T) {
	ft := &failures{TB: t}
	s := fakellm.New(ft, fakellm.TextReply(), fakellm.TextReply())
	s.Add(fakellm.TextReply())
	post(t, s.URL+"/v1/completions", `{}`)
	post(t, s.URL+fakellm.Path, `{"messages":[{"role":"user","content":3}]}`)
	post(t, s.URL+fakellm.Path, `{}`)
	errs := ft.got()
	if len(errs) != 2 || !strings.Contains(errs[0], "/v1/completions") || !strings.Contains(errs[1], "does not decode") {
		t.Errorf("failures = %q, want the path and the body", errs)
	}
}
