package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service/openai"
)

// TestMain lets the test binary double as a server that runs one command with the shell
// tool (SHELL_TEST_COMMAND) and prints its output, so that a test can kill a real process
// in the middle of a call, as a crash would.
func TestMain(m *testing.M) {
	if command := os.Getenv("SHELL_TEST_COMMAND"); command != "" {
		args, _ := json.Marshal(map[string]string{"command": command})
		tool := openai.NewShellTool(openai.ShellConfig{Timeout: time.Hour, MaxOutput: 1 << 20})
		result, err := tool.Call(context.Background(), string(args), stdout{})
		fmt.Println(result, err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// stdout prints a call's output as it comes.
type stdout struct{}

func (stdout) Output(delta string) error {
	_, err := os.Stdout.WriteString(delta)
	return err
}
