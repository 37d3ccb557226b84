package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// addTool is a custom tool: the model calls it with two numbers and reads their sum.
type addTool struct{}

func (addTool) Name() string        { return "add" }
func (addTool) Description() string { return "Add two numbers exactly." }

func (addTool) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a": map[string]any{"type": "number"},
			"b": map[string]any{"type": "number"},
		},
		"required": []any{"a", "b"},
	}
}

func (addTool) Call(ctx context.Context, arguments string, out openai.ToolOutput) (string, error) {
	var args struct{ A, B float64 }
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", fmt.Errorf("arguments must be {\"a\": number, \"b\": number}: %v", err)
	}
	// What a tool prints is shown to the user live; the result goes to the model.
	if err := out.Output(fmt.Sprintf("adding %g and %g\n", args.A, args.B)); err != nil {
		return "", err
	}
	return strconv.FormatFloat(args.A+args.B, 'g', -1, 64), nil
}

// Register the agent, with a custom tool, in the registry the service picks agents from.
// A stand-in endpoint plays the model here; a real setup points BaseURL at OpenAI
// ("https://api.openai.com/v1"), Ollama ("http://localhost:11434/v1") or vLLM.
func Example() {
	model := fakeModel()
	defer model.Close()

	agent, err := openai.New(openai.Config{
		BaseURL:      model.URL + "/v1",
		APIKey:       "sk-…", // from the environment or a secret store, never from users
		Model:        "gpt-4o-mini",
		SystemPrompt: "You are a careful assistant.",
		Tools:        []openai.Tool{addTool{}},
	})
	if err != nil {
		log.Fatal(err)
	}
	var agents service.Agents
	agents.Register("openai", "Chat with an OpenAI-compatible model", agent)

	// The service runs it like this; printOutput stands in for the service's Output.
	runner, _ := agents.Get("openai")
	history := []service.HistoryMessage{{Message: service.Message{
		Role: service.RoleUser, Kind: service.KindText, Content: "What is 2 + 3?",
	}}}
	if err := runner.Run(context.Background(), service.RunRequest{History: history}, printOutput{}); err != nil {
		log.Fatal(service.ErrorMessage(err))
	}
	// Output:
	// [add {"a":2,"b":3}]
	// | adding 2 and 3
	// [result 5]
	// 2 + 3 = 5.
}

// printOutput is a minimal service.Output that prints what the agent does.
type printOutput struct{}

func (printOutput) Text(delta string) error { fmt.Print(delta); return nil }

func (printOutput) Ask(ctx context.Context, prompt string, choices []string) (string, error) {
	return "", fmt.Errorf("not in this example")
}

func (printOutput) Pose(service.QuestionSpec) (service.Pending, error) {
	return nil, fmt.Errorf("not in this example")
}

func (printOutput) StartTool(id, name, arguments string, _ ...service.ToolOption) (service.ToolHandle, error) {
	fmt.Printf("[%s %s]\n", name, arguments)
	return printHandle{id, arguments}, nil
}

func (printOutput) ReportUsage(model string, u service.Usage) error { return nil }

func (printOutput) BeforeModelCall(context.Context, int) error { return nil }

func (printOutput) Steers() ([]service.Message, error) { return nil, nil }

// printHandle is a call that needs no approval: it runs with the arguments asked for.
type printHandle struct{ id, args string }

func (h printHandle) ID() string                               { return h.id }
func (h printHandle) Approval(context.Context) (string, error) { return h.args, nil }
func (printHandle) AwaitsApproval() bool                       { return false }
func (printHandle) Output(delta string) error                  { fmt.Print("| ", delta); return nil }
func (printHandle) Finish(r string, err error) error {
	fmt.Printf("[result %s]\n", r)
	return err
}

// fakeModel answers the first request with a call of add and the second with text.
func fakeModel() *httptest.Server {
	var n atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if n.Add(1) == 1 {
			fmt.Fprint(w, fakellm.Chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"add","arguments":"{\"a\":2,\"b\":3}"}}]}`, ""))
			fmt.Fprint(w, fakellm.Chunk(`{}`, "tool_calls"))
		} else {
			fmt.Fprint(w, fakellm.Chunk(`{"content":"2 + 3 = 5."}`, "stop"))
		}
		fmt.Fprint(w, fakellm.Done)
	}))
}
