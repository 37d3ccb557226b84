package openai

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/talkgraph/talkgraph/service"
)

// guardedOutput keeps the API key out of everything written to the service's Output: the
// model's text, tool arguments, what tools print (a shell can print the environment),
// results and questions. A provider that echoes the key, or a command that prints it,
// shows "[redacted]" instead.
//
// Streamed text is redacted across deltas: a delta ending with what could be the start of
// the key is held back until the next one shows it is not. flush releases what is held.
type guardedOutput struct {
	out    service.Output
	secret string

	mu   sync.Mutex
	text streamRedactor
}

func guard(out service.Output, secret string) *guardedOutput {
	return &guardedOutput{out: out, secret: secret, text: streamRedactor{secret: secret}}
}

func (g *guardedOutput) Text(delta string) error {
	g.mu.Lock()
	s := g.text.push(delta)
	g.mu.Unlock()
	if s == "" {
		return nil
	}
	return g.out.Text(s)
}

// flush writes the text held back, if any.
func (g *guardedOutput) flush() error {
	g.mu.Lock()
	s := g.text.flush()
	g.mu.Unlock()
	if s == "" {
		return nil
	}
	return g.out.Text(s)
}

func (g *guardedOutput) Ask(ctx context.Context, prompt string, choices []string) (string, error) {
	if err := g.flush(); err != nil {
		return "", err
	}
	var cs []string
	for _, c := range choices {
		cs = append(cs, redact(c, g.secret))
	}
	return g.out.Ask(ctx, redact(prompt, g.secret), cs)
}

func (g *guardedOutput) StartTool(id, name, arguments string) (service.ToolHandle, error) {
	if err := g.flush(); err != nil {
		return nil, err
	}
	h, err := g.out.StartTool(id, name, redact(arguments, g.secret))
	if err != nil {
		return nil, err
	}
	return &guardedHandle{h: h, secret: g.secret, output: streamRedactor{secret: g.secret}}, nil
}

func (g *guardedOutput) ReportUsage(model string, u service.Usage) error {
	return g.out.ReportUsage(model, u)
}

type guardedHandle struct {
	h      service.ToolHandle
	secret string

	mu     sync.Mutex
	output streamRedactor
}

func (g *guardedHandle) ID() string { return g.h.ID() }

func (g *guardedHandle) Output(delta string) error {
	g.mu.Lock()
	s := g.output.push(delta)
	g.mu.Unlock()
	if s == "" {
		return nil
	}
	return g.h.Output(s)
}

func (g *guardedHandle) Finish(result string, err error) error {
	g.mu.Lock()
	s := g.output.flush()
	g.mu.Unlock()
	if s != "" {
		_ = g.h.Output(s)
	}
	if err != nil {
		err = errors.New(redact(err.Error(), g.secret))
	}
	return g.h.Finish(redact(result, g.secret), err)
}

// streamRedactor removes a secret from a text that arrives in pieces.
type streamRedactor struct {
	secret string
	held   string
}

// push returns what of the text so far can be released.
func (r *streamRedactor) push(delta string) string {
	if r.secret == "" {
		return delta
	}
	s := redact(r.held+delta, r.secret)
	k := overlap(s, r.secret)
	r.held = s[len(s)-k:]
	return s[:len(s)-k]
}

// flush releases what is held: the text ended, so it cannot be the key.
func (r *streamRedactor) flush() string {
	s := r.held
	r.held = ""
	return s
}

// overlap returns the length of the longest suffix of s that is a proper prefix of secret.
func overlap(s, secret string) int {
	for k := min(len(s), len(secret)-1); k > 0; k-- {
		if strings.HasSuffix(s, secret[:k]) {
			return k
		}
	}
	return 0
}
