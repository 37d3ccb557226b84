package fakellm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// The streaming wire format of chat completions: an event stream of one
// "data: {chunk}\n\n" event a chunk ([Chunk]), each flushed as it is written, ended by
// [Done].

// Done is the event that ends a stream.
const Done = "data: [DONE]\n\n"

// Data is the event that carries payload: a chunk's JSON, or anything else a server
// may send, such as an error object.
func Data(payload string) string { return "data: " + payload + "\n\n" }

// WriteSSE writes events ([Chunk], [Data], [Done] or any other) to w, flushing after
// each, as servers do. The first write sends the event-stream headers; no events send
// nothing.
func WriteSSE(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for _, e := range events {
		_, _ = io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

// SSE is a handler that streams events with [WriteSSE].
func SSE(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		WriteSSE(w, events...)
	}
}

// Chunk is the event of a chat.completion.chunk as OpenAI sends it, with one choice;
// delta is its raw JSON, and finish its finish_reason ("stop", "tool_calls"…), "" for null.
func Chunk(delta, finish string) string {
	fr := "null"
	if finish != "" {
		fr = quote(finish)
	}
	return Data(fmt.Sprintf(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1730000000,`+
		`"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f33640a400",`+
		`"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"obfuscation":"x1"}`, delta, fr))
}

// RoleDelta is the delta that begins a text reply.
const RoleDelta = `{"role":"assistant","content":"","refusal":null}`

// TextDelta is a delta carrying s as content.
func TextDelta(s string) string { return `{"content":` + quote(s) + `}` }

// ToolCallDelta is the delta that begins tool call index of a reply, as OpenAI streams it:
// the call's ID and name, with no arguments yet; [ArgumentsDelta] brings them.
func ToolCallDelta(index int, id, name string) string {
	return fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"index":%d,"id":%s,"type":"function",`+
		`"function":{"name":%s,"arguments":""}}],"refusal":null}`, index, quote(id), quote(name))
}

// ArgumentsDelta is a delta carrying a fragment of the arguments of tool call index.
func ArgumentsDelta(index int, fragment string) string {
	return fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, index, quote(fragment))
}

// Usage is the last chunk of a stream asked for with stream_options.include_usage: no
// choices, and what the request cost.
func Usage(prompt, completion, cached int) string {
	return Data(fmt.Sprintf(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1730000000,`+
		`"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f33640a400","choices":[],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0},`+
		`"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"x2"}`,
		prompt, completion, prompt+completion, cached))
}

// TextReply is a handler that streams a whole reply made of deltas: the role, each delta
// as content, finish_reason "stop", the usage (when the request asked for it, as OpenAI
// does: prompt 20 tokens of which 5 cached, one completion token a delta), then [Done].
func TextReply(deltas ...string) http.HandlerFunc {
	events := []string{Chunk(RoleDelta, "")}
	for _, d := range deltas {
		events = append(events, Chunk(TextDelta(d), ""))
	}
	events = append(events, Chunk(`{}`, "stop"))
	return func(w http.ResponseWriter, r *http.Request) {
		evs := events
		if wantsUsage(r) {
			evs = append(evs[:len(evs):len(evs)], Usage(20, len(deltas), 5))
		}
		WriteSSE(w, append(evs[:len(evs):len(evs)], Done)...)
	}
}

// wantsUsage reports whether a request asked for the usage chunk. It reads the body and
// puts it back.
func wantsUsage(r *http.Request) bool {
	raw, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return false
	}
	var req struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	return json.Unmarshal(raw, &req) == nil && req.StreamOptions.IncludeUsage
}

// ErrorReply is a handler that answers with an HTTP error: status, a JSON body, and the
// headers given as name, value pairs (such as "Retry-After", "1").
func ErrorReply(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func quote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
