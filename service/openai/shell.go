package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/talkgraph/talkgraph/service"
)

const shellName = "shell"

// shellTool runs commands with sh -c. The process handling is in shell_unix.go.
type shellTool struct{ cfg ShellConfig }

func newShellTool(cfg ShellConfig) Tool { return &shellTool{cfg: cfg} }

func (*shellTool) Name() string { return shellName }

// DefaultPolicy is ASK: a command runs on this machine only once a person approved it,
// unless the operator names the shell in the server's policies.
func (*shellTool) DefaultPolicy() service.ToolPolicy { return service.PolicyAsk }

// ActsOnHost is true: the shell is not offered to guests unless the operator says so.
func (*shellTool) ActsOnHost() bool { return true }

func (s *shellTool) Description() string {
	return fmt.Sprintf("Run a command with `sh -c` on the server and return its combined stdout and stderr. "+
		"Stdin is empty. The command is killed after %s; output beyond %d bytes is dropped.",
		s.cfg.Timeout, s.cfg.MaxOutput)
}

func (*shellTool) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"command": map[string]any{"type": "string", "description": "The command line to run."},
		},
		"required": []any{"command"},
	}
}

func (s *shellTool) Call(ctx context.Context, arguments string, out ToolOutput) (string, error) {
	var args struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", fmt.Errorf(`arguments must be a JSON object like {"command": "ls -l"}: %v`, err)
	}
	if strings.TrimSpace(args.Command) == "" {
		return "", errors.New(`"command" is required`)
	}
	return runShell(ctx, s.cfg, args.Command, out)
}

// collector keeps a command's output up to a cap and streams it as it comes, holding back
// the bytes of a character split between two reads so that every delta is valid UTF-8.
type collector struct {
	max       int
	out       ToolOutput
	kept      int // bytes of output kept so far
	pending   []byte
	text      strings.Builder // what was streamed: the result's output
	truncated bool
	quiet     bool // out refused a delta: the run is over, keep collecting silently
}

func (c *collector) write(p []byte) {
	if room := c.max - c.kept; len(p) > room {
		p, c.truncated = p[:room], true
	}
	if len(p) == 0 {
		return
	}
	c.kept += len(p)
	c.pending = append(c.pending, p...)
	n := completeUTF8(c.pending)
	c.emit(c.pending[:n])
	c.pending = append(c.pending[:0], c.pending[n:]...)
}

// flush streams what is held back, at the end of the output; a character the cap cut
// in two is dropped rather than shown broken.
func (c *collector) flush() {
	if !c.truncated {
		c.emit(c.pending)
	}
	c.pending = nil
}

func (c *collector) emit(b []byte) {
	if len(b) == 0 {
		return
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	c.text.WriteString(s)
	if !c.quiet && c.out.Output(s) != nil {
		c.quiet = true
	}
}

// readAll collects r until it ends or fails; past the cap it drains and discards, so that
// the command never blocks on a full pipe.
func (c *collector) readAll(r io.Reader) {
	buf := make([]byte, 16<<10)
	for {
		n, err := r.Read(buf)
		c.write(buf[:n])
		if err != nil {
			c.flush()
			return
		}
	}
}

// completeUTF8 returns the length of the longest prefix of p that does not end inside a
// (valid) multi-byte character.
func completeUTF8(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return len(p)
			}
			return i
		}
	}
	return len(p)
}

// result is what the model reads: the output and how the command ended.
func (c *collector) result(ending string) string {
	var b strings.Builder
	b.WriteString(c.text.String())
	if c.truncated {
		fmt.Fprintf(&b, "\n[output cut at %d bytes]", c.max)
	}
	if ending != "" {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(ending)
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return b.String()
}
