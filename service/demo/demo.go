// Package demo is talkgraph's built-in agent: it needs nothing (no model, no network) and
// exercises the whole protocol, so a fresh server can be tried at once and tests have a
// predictable agent. It replies to a message word by word; its commands are
//
//	/ask <question>  asks the user, then replies using the answer
//	/slow <n>        streams n chunks 100 ms apart (at most 10000)
//	/fail            fails the run
//	/tool <text>     calls a pretend "echo" tool that prints text, then replies
//	/panic           panics (the run fails; the server goes on)
package demo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/talkgraph/talkgraph/service"
)

// Agent is the demo agent. ChunkDelay is the pause between two streamed words, so a person
// can watch a reply stream; SlowDelay is the pause between /slow chunks (default 100 ms).
type Agent struct {
	ChunkDelay time.Duration
	SlowDelay  time.Duration
}

// DefaultChunkDelay is the pause per word the server gives the demo agent unless told
// otherwise: slow enough to watch a reply stream.
const DefaultChunkDelay = 40 * time.Millisecond

// Description is shown in the list of agents.
const Description = "Built-in demo: echoes you word by word; try /ask, /slow 50, /tool, /fail."

// Run implements service.Runner.
func (a *Agent) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	// Like a model, it reports what the reply cost: a word of the history read is an input
	// token, a word written an output token.
	counted := &countingOutput{Output: out}
	if err := a.run(ctx, req, counted); err != nil {
		return err
	}
	in := 0
	for _, m := range req.History {
		in += countWords(m.Content)
	}
	return out.ReportUsage(Model, service.Usage{InputTokens: in, OutputTokens: counted.words})
}

// Model is the name the demo agent reports its usage under.
const Model = "demo"

// countingOutput counts the words written through it.
type countingOutput struct {
	service.Output
	words int
}

func (c *countingOutput) Text(delta string) error {
	c.words += countWords(delta)
	return c.Output.Text(delta)
}

// countWords is len(strings.Fields(s)) without the slice: the demo agent counts every word
// it streams.
func countWords(s string) int {
	n, in := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
		} else if !in {
			in = true
			n++
		}
	}
	return n
}

func (a *Agent) run(ctx context.Context, req service.RunRequest, out service.Output) error {
	// The message to answer is the last one the user typed; anything after it is this
	// run's own earlier work (a question it asked and its answer, when the run resumes
	// after a restart).
	last := -1
	for i, m := range req.History {
		if m.Role == service.RoleUser && m.Kind == service.KindText {
			last = i
		}
	}
	if last < 0 {
		return a.say(ctx, out, "Hello! Send me a message.")
	}
	text := strings.TrimSpace(req.History[last].Content)
	cmd, arg, _ := strings.Cut(text, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/ask":
		if arg == "" {
			arg = "What should I answer?"
		}
		answer, ok := answered(req.History[last+1:])
		if !ok {
			var err error
			if answer, err = out.Ask(ctx, arg, nil); err != nil {
				return err
			}
		}
		return a.say(ctx, out, fmt.Sprintf("You answered %q. Thank you!", answer))
	case "/slow":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 || n > 10000 {
			return service.Errorf(service.EINVALID, "/slow needs a number of chunks from 1 to 10000")
		}
		delay := a.SlowDelay
		if delay <= 0 {
			delay = 100 * time.Millisecond
		}
		start := time.Now()
		for i := 1; i <= n; i++ {
			if err := pause(ctx, time.Until(start.Add(time.Duration(i)*delay))); err != nil {
				return err
			}
			if err := out.Text(fmt.Sprintf("chunk %d. ", i)); err != nil {
				return err
			}
		}
		return nil
	case "/fail":
		return service.Errorf(service.EINTERNAL, "The demo agent failed, as you asked.")
	case "/panic":
		panic("the demo agent panicked, as asked")
	case "/tool":
		if arg == "" {
			arg = "hello"
		}
		tool, err := out.StartTool("", "echo", fmt.Sprintf("{%q:%q}", "text", arg))
		if err != nil {
			return err
		}
		for _, w := range strings.SplitAfter(arg, " ") {
			if err := pause(ctx, a.ChunkDelay); err != nil {
				return err
			}
			if err := tool.Output(w); err != nil {
				return err
			}
		}
		if err := tool.Finish(arg, nil); err != nil {
			return err
		}
		return a.say(ctx, out, "The echo tool printed: "+arg)
	}
	return a.say(ctx, out, "You said: "+text)
}

// answered finds the answer to this run's question in the history after the message.
func answered(after []service.HistoryMessage) (string, bool) {
	for _, m := range after {
		if m.Kind == service.KindAnswer {
			return m.Content, true
		}
	}
	return "", false
}

// say streams text word by word, the first at once and then one every ChunkDelay on a
// schedule set at the start, the way a model writes at its own pace however busy the
// server is: a late word does not push the next ones back.
func (a *Agent) say(ctx context.Context, out service.Output, text string) error {
	start := time.Now()
	for i, w := range strings.SplitAfter(text, " ") {
		if err := pause(ctx, time.Until(start.Add(time.Duration(i)*a.ChunkDelay))); err != nil {
			return err
		}
		if err := out.Text(w); err != nil {
			return err
		}
	}
	return nil
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ModelFor names the model the demo agent's runs report their usage under
// (service.ModelNamer).
func (a *Agent) ModelFor(service.Settings) string { return Model }
