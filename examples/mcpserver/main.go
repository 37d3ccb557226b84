// Command mcpserver is a small MCP server written with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk): notes kept as files in a directory. It is an
// example of a server talkgraph offers the openai agent's model (see the README's "Tools
// from MCP servers"), and talkgraph's end-to-end tests run it.
//
//	go run ./examples/mcpserver -dir ./notes                       # over stdio, as MCP_CONFIG starts it
//	go run ./examples/mcpserver -dir ./notes -http 127.0.0.1:8931  # over streamable HTTP, at http://127.0.0.1:8931/mcp
//
// Its tools:
//
//	list_notes {}                 read-only (readOnlyHint): the notes' names
//	read_note {name}              read-only: a note's text
//	write_note {name, text}       destructive (destructiveHint): writes a note
//	count {to, every_ms}          read-only and slow: counts to `to`, one progress
//	                              notification a step, and stops when the call is cancelled
//	sketch {}                     read-only: a small picture with a caption (an image
//	                              content, which talkgraph does not pass on to the model)
//
// With -record FILE every tools/call request is appended to FILE as a JSON line as it
// arrives, before its arguments are checked ({"event":"call","tool":…,"arguments":…}), and
// so are the server's start ({"event":"start","pid":…}) and the end of a call stopped
// by its client ({"event":"cancelled","tool":…}): what the tests read to prove what did
// or did not reach the server. With -token, over HTTP, a request must carry
// "Authorization: Bearer <token>".
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	dir := flag.String("dir", ".", "the directory the notes are kept in")
	addr := flag.String("http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8931) instead of stdio")
	record := flag.String("record", "", "append every call (and the server's start) to this file as JSON lines")
	token := flag.String("token", "", "over HTTP: the bearer token every request must carry")
	flag.Parse()
	log.SetPrefix("mcpserver: ")
	log.SetFlags(0)

	n := &notes{dir: *dir, rec: &recorder{path: *record}}
	transport := "stdio"
	if *addr != "" {
		transport = "http"
	}
	n.rec.add(map[string]any{"event": "start", "pid": os.Getpid(), "transport": transport})
	server := n.server()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *addr == "" {
		// A client ends a stdio server by closing its stdin (Run returns), or by a signal.
		if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	if *token != "" {
		h = requireToken(*token, h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("serving MCP over streamable HTTP at http://%s/mcp", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// requireToken refuses requests without the bearer token.
func requireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// notes is the server's state: a directory of notes and where calls are recorded.
type notes struct {
	dir string
	rec *recorder
}

var noteName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// path is where the note name is kept; names are plain, so that no call reaches outside
// the directory.
func (n *notes) path(name string) (string, error) {
	if !noteName.MatchString(name) {
		return "", fmt.Errorf("a note's name is 1 to 64 letters, digits, - and _; got %q", name)
	}
	return filepath.Join(n.dir, name+".txt"), nil
}

type nameArgs struct {
	Name string `json:"name" jsonschema:"the note's name: 1 to 64 letters, digits, - and _"`
}

type writeArgs struct {
	Name string `json:"name" jsonschema:"the note's name: 1 to 64 letters, digits, - and _"`
	Text string `json:"text" jsonschema:"what the note says"`
}

type countArgs struct {
	To      int `json:"to" jsonschema:"the number to count to, 1 to 1000"`
	EveryMS int `json:"every_ms,omitempty" jsonschema:"milliseconds between two numbers, 1 to 10000 (default 100)"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// server makes the MCP server and its tools.
func (n *notes) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "talkgraph-notes", Version: "1.0.0"}, nil)
	// Every tools/call is recorded as it arrives, before the SDK checks its arguments.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" {
				n.rec.add(map[string]any{"event": "call", "tool": p.Name, "arguments": p.Arguments})
			}
			return next(ctx, method, req)
		}
	})
	yes := true

	mcp.AddTool(s, &mcp.Tool{Name: "list_notes", Description: "List the names of the notes.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			files, err := filepath.Glob(filepath.Join(n.dir, "*.txt"))
			if err != nil {
				return nil, nil, err
			}
			var names []string
			for _, f := range files {
				names = append(names, strings.TrimSuffix(filepath.Base(f), ".txt"))
			}
			slices.Sort(names)
			if len(names) == 0 {
				return text("(no notes)"), nil, nil
			}
			return text(strings.Join(names, "\n")), nil, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "read_note", Description: "Read a note.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in nameArgs) (*mcp.CallToolResult, any, error) {
			p, err := n.path(in.Name)
			if err != nil {
				return nil, nil, err
			}
			b, err := os.ReadFile(p)
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil, fmt.Errorf("there is no note named %q", in.Name)
			}
			if err != nil {
				return nil, nil, err
			}
			return text(string(b)), nil, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "write_note", Description: "Write a note, replacing one of the same name.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
			p, err := n.path(in.Name)
			if err != nil {
				return nil, nil, err
			}
			if err := os.WriteFile(p, []byte(in.Text), 0o644); err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("wrote %s (%d bytes)", in.Name, len(in.Text))), nil, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "count", Description: "Count slowly to a number, reporting each step.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in countArgs) (*mcp.CallToolResult, any, error) {
			every := time.Duration(in.EveryMS) * time.Millisecond
			if every == 0 {
				every = 100 * time.Millisecond
			}
			if in.To < 1 || in.To > 1000 || every < 0 || every > 10*time.Second {
				return nil, nil, errors.New("count to 1 to 1000, every 1 to 10000 ms")
			}
			token := req.Params.GetProgressToken()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 1; i <= in.To; i++ {
				select {
				case <-ctx.Done():
					n.rec.add(map[string]any{"event": "cancelled", "tool": "count", "at": i - 1})
					return nil, nil, ctx.Err()
				case <-tick.C:
				}
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
						Progress: float64(i), Total: float64(in.To), Message: fmt.Sprintf("counted %d of %d", i, in.To)})
				}
			}
			return text(fmt.Sprintf("counted to %d", in.To)), nil, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "sketch", Description: "Draw a small picture.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a red dot"},
				&mcp.ImageContent{MIMEType: "image/png", Data: pixel},
			}}, nil, nil
		})
	return s
}

// pixel is a 1×1 red PNG.
var pixel, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")

// recorder appends events to a file as JSON lines; with no path it records nothing.
type recorder struct {
	path string
	mu   sync.Mutex
}

func (r *recorder) add(event map[string]any) {
	if r.path == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	event["pid"] = os.Getpid()
	b, _ := json.Marshal(event)
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Printf("record: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		log.Printf("record: %v", err)
	}
}
