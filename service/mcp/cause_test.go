package mcp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkgraph/talkgraph/service/mcp"
)

// hostileServer is a stdio server whose one tool, misbehave, breaks the protocol in the
// middle of the call, in the way its argument says: a line longer than the tests' limit,
// a line that is not JSON-RPC, an exit with status 3 (after writing a secret to stderr),
// a crash (a panic, whose stack trace goes to stderr), its own kill. The call never gets
// its answer.
func hostileServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "hostile", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "misbehave", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, in struct {
			How string `json:"how"`
		}) (*sdk.CallToolResult, any, error) {
			switch in.How {
			case "long-line": // a well-formed message, but too long
				_, _ = os.Stdout.WriteString(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` +
					strings.Repeat("x", testLineLimit) + `"}}` + "\n")
			case "junk":
				_, _ = os.Stdout.WriteString("this is not JSON-RPC\n")
			case "exit":
				fmt.Fprintln(os.Stderr, "secret=hunter2")
				os.Exit(3)
			case "crash":
				panic("boom")
			case "kill":
				p, _ := os.FindProcess(os.Getpid())
				_ = p.Kill()
			}
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	return s
}

// testLineLimit is the limit the tests set on the lines of a stdio server.
const testLineLimit = 64 << 10

// serveHTTP serves a testServer over streamable HTTP on a port of its own, and prints its
// URL on a line, until it is killed.
func serveHTTP() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := testServer(nil)
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	err = http.Serve(ln, sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// A call under way when its stdio server breaks the protocol or dies says why, in words
// for the model and the user: a line longer than the limit, a line that is not JSON-RPC,
// the exit status of its process, a crash, a kill. Never "context canceled", nor what the
// server wrote to stderr (a secret, a stack trace).
func TestCallSaysWhyItsStdioServerBrokeOff(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, how, want string }{
		{"LineLongerThanTheLimit", "long-line", fmt.Sprintf("it wrote a line longer than %d bytes", testLineLimit)},
		{"LineThatIsNotJSONRPC", "junk", "it wrote a line that is not a JSON-RPC message ("},
		{"ExitStatus", "exit", "its process exited with status 3"},
		{"Crash", "crash", "its process exited with status 2"},
		{"Kill", "kill", "its process was ended by a signal (killed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.how == "kill" && runtime.GOOS == "windows" {
				t.Skip("a process is killed by a signal on Unix")
			}
			limits := mcp.DefaultLimits()
			limits.MaxMessageBytes = testLineLimit
			m, _ := start(t, limits, mcp.ServerConfig{Name: "files", Command: self, Env: map[string]string{"MCP_TEST_SERVER": "hostile"}})
			waitState(t, m, "files", mcp.StateUp)
			_, err := tools(m)["mcp__files__misbehave"].Call(context.Background(), `{"how":"`+tc.how+`"}`, &printed{})
			want := `the MCP server "files" broke off during the call: ` + tc.want
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("the call failed with %v, want %s", err, want)
			}
			for _, never := range []string{"context canceled", "hunter2", "goroutine", "panic"} {
				if strings.Contains(err.Error(), never) {
					t.Errorf("the call's error %q holds %q", err, never)
				}
			}
		})
	}
}

// A call under way when the process of its HTTP server dies says that the server went
// away, without the secrets of the server's URL and headers, and never "context canceled".
func TestCallSaysItsHTTPServerWentAway(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := exec.Command(self)
	proc.Env = append(os.Environ(), "MCP_TEST_SERVER=http")
	stdout, err := proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = proc.Process.Kill(); _ = proc.Wait() }()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var addr string
	select {
	case addr = <-line:
	case <-time.After(patience):
		t.Fatal("the HTTP server did not say where it listens")
	}
	// Secrets where a URL may hold them, and in a header.
	url := strings.Replace(addr, "http://", "http://ada:pw-s3cret@", 1) + "?token=q-s3cret"
	m, _ := start(t, mcp.DefaultLimits(), mcp.ServerConfig{Name: "web", URL: url, Headers: map[string]string{"Authorization": "Bearer h-s3cret"}})
	waitState(t, m, "web", mcp.StateUp)

	out := &printed{}
	done := make(chan error, 1)
	go func() {
		_, err := tools(m)["mcp__web__slow"].Call(context.Background(), `{}`, out)
		done <- err
	}()
	out.waitFor(t, "step 2\n")
	if err := proc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		want := `the MCP server "web" broke off during the call: the HTTP server went away (`
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("the call failed with %v, want %s…", err, want)
		}
		for _, never := range []string{"context canceled", "s3cret"} {
			if strings.Contains(err.Error(), never) {
				t.Errorf("the call's error %q holds %q", err, never)
			}
		}
	case <-time.After(patience):
		t.Fatal("the call did not end once its server was killed")
	}
}
