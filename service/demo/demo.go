// Package demo is talkgraph's built-in agent: it needs nothing (no model, no network) and
// exercises the whole protocol, so a fresh server can be tried at once and tests have a
// predictable agent. It replies to a message word by word; its commands are
//
//	/ask <question>  asks the user, then replies using the answer
//	/slow <n>        streams n chunks 100 ms apart (at most 10000)
//	/fail            fails the run
//	/tool <text>     calls its "echo" tool, which prints text, under the tool's policy,
//	                 then replies
//	/approve <text>  calls echo and waits for the user's decision even where echo is
//	                 ALLOW (under DENY it is refused unasked), then replies with the
//	                 tool's result or the rejection's reason
//	/ask-many <n>    asks n questions at once (at most 10), waits for all, and replies
//	                 with every answer
//	/form            asks for a name and an age (a JSON Schema form), then replies with
//	                 the answer
//	/markdown <n>    streams a long Markdown reply of about n words (at most 100000),
//	                 word by word: headings, lists, task lists, tables, code blocks, links
//	                 and emphasis, for trying a client's rendering of long replies
//	/panic           panics (the run fails; the server goes on)
//
// Its runs resume on their history after a restart: a question answered, a call decided
// meanwhile is found there.
package demo

import (
	"context"
	"encoding/json"
	"errors"
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
const Description = "Built-in demo: echoes you word by word; try /ask, /slow 50, /tool, /approve, /ask-many 2, /form, /markdown 300, /history, /fail."

// The echo tool: its name, description and input schema.
const (
	echoName        = "echo"
	echoDescription = "Prints the text it is given, word by word, and returns it."
	echoSchema      = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`
	// approveCallID names /approve's call of echo, so that a run that resumes on its
	// history after the decision gets the same call back (Output.StartTool).
	approveCallID = "demo-approve"
)

// FormSchema is the form /form asks for: a name and an age.
const FormSchema = `{"type":"object","properties":{"name":{"type":"string","minLength":1},"age":{"type":"integer","minimum":0}},"required":["name","age"]}`

// Tools implements service.ToolLister: the echo tool (ALLOW unless a policy says
// otherwise).
func (a *Agent) Tools(service.Settings) []service.ToolInfo {
	return []service.ToolInfo{{Name: echoName, Description: echoDescription, InputSchema: echoSchema}}
}

// Run implements service.Runner.
func (a *Agent) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	// Like a model, it makes one call per reply, weighed against the budgets first, and
	// reports what the reply cost: a word of the branch read is an input token, a word
	// written an output token.
	in := 0
	for _, m := range req.History {
		in += countWords(m.Content)
	}
	if err := out.BeforeModelCall(ctx, in+expectedWords(req.History)); err != nil {
		return err
	}
	counted := &countingOutput{Output: out}
	if err := a.run(ctx, req, counted); err != nil {
		return err
	}
	return out.ReportUsage(Model, service.Usage{InputTokens: in, OutputTokens: counted.words})
}

// expectedWords is about how many words the reply to the history's last message has.
func expectedWords(history []service.HistoryMessage) int {
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		if m.Role != service.RoleUser || m.Kind != service.KindText {
			continue
		}
		cmd, arg, _ := strings.Cut(strings.TrimSpace(m.Content), " ")
		n, _ := strconv.Atoi(strings.TrimSpace(arg))
		switch cmd {
		case "/slow":
			return 2 * max(n, 0)
		case "/markdown":
			return max(n, 0) + 100
		}
		return countWords(m.Content) + 10
	}
	return 10
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
			var why string
			if answer, why, err = ask(ctx, out, service.QuestionSpec{Prompt: arg}); err != nil {
				return err
			} else if why != "" {
				return a.say(ctx, out, fmt.Sprintf("You did not answer (%s). Ask me again any time.", why))
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
			if i > 1 { // between two chunks, it takes what the user steered it with
				steers, err := out.Steers()
				if err != nil {
					return err
				}
				for _, m := range steers {
					if err := out.Text(" [steered: " + m.Content + "] "); err != nil {
						return err
					}
				}
			}
			if err := out.Text(fmt.Sprintf("chunk %d. ", i)); err != nil {
				return err
			}
		}
		return nil
	case "/history":
		// What this run read: the user's messages of its history, in order.
		var said []string
		for _, m := range req.History {
			if m.Role == service.RoleUser {
				said = append(said, m.Content)
			}
		}
		return a.say(ctx, out, "I read: "+strings.Join(said, " | "))
	case "/markdown":
		n := 300
		if arg != "" {
			var err error
			if n, err = strconv.Atoi(arg); err != nil || n < 1 || n > 100000 {
				return service.Errorf(service.EINVALID, "/markdown needs a number of words from 1 to 100000")
			}
		}
		return a.say(ctx, out, MarkdownText(n))
	case "/fail":
		return service.Errorf(service.EINTERNAL, "The demo agent failed, as you asked.")
	case "/panic":
		panic("the demo agent panicked, as asked")
	case "/tool", "/approve":
		if arg == "" {
			arg = "hello"
		}
		args, _ := json.Marshal(map[string]string{"text": arg})
		var tool service.ToolHandle
		var err error
		if cmd == "/approve" {
			tool, err = out.StartTool(approveCallID, echoName, string(args), service.AlwaysAsk())
		} else {
			tool, err = out.StartTool("", echoName, string(args))
		}
		if err != nil {
			return err
		}
		result, err := a.echo(ctx, tool)
		var rejected *service.Rejected
		switch {
		case errors.As(err, &rejected):
			return a.say(ctx, out, "The echo tool did not run: "+rejected.Text())
		case err != nil:
			return err
		}
		return a.say(ctx, out, "The echo tool printed: "+result)
	case "/ask-many":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 || n > 10 {
			return service.Errorf(service.EINVALID, "/ask-many needs a number of questions from 1 to 10")
		}
		return a.askMany(ctx, out, n, req.History[last+1:])
	case "/form":
		answer, ok := answered(req.History[last+1:])
		if !ok {
			var err error
			var why string
			if answer, why, err = ask(ctx, out, service.QuestionSpec{Prompt: "Who are you? Give your name and your age.", AnswerSchema: FormSchema}); err != nil {
				return err
			} else if why != "" {
				return a.say(ctx, out, fmt.Sprintf("You did not fill in the form (%s).", why))
			}
		}
		var form struct {
			Name string `json:"name"`
			Age  int    `json:"age"`
		}
		_ = json.Unmarshal([]byte(answer), &form)
		return a.say(ctx, out, fmt.Sprintf("Hello %s, aged %d. Your answer was %s", form.Name, form.Age, answer))
	}
	return a.say(ctx, out, "You said: "+text)
}

// MarkdownText is /markdown's reply: sections of Markdown (a heading, a paragraph with
// emphasis, inline code and a link, a list, a task list, a table and a code block, in
// turn) until it has about n words, then "The end." on a line of its own. The same n
// gives the same text.
func MarkdownText(n int) string {
	langs := []struct{ name, code string }{
		{"go", "func add(a, b int) int {\n\treturn a + b\n}"},
		{"python", "def add(a, b):\n    return a + b"},
		{"ts", "const add = (a: number, b: number): number => a + b;"},
		{"json", "{\"section\": %d, \"ok\": true}"},
	}
	var b strings.Builder
	for i := 1; countWords(b.String()) < n; i++ {
		fmt.Fprintf(&b, "## Section %d\n\n", i)
		fmt.Fprintf(&b, "Paragraph %d has **bold words**, *some emphasis*, ~~a struck word~~, `inline code` and [a link to example %d](https://example.com/%d). ", i, i, i)
		b.WriteString("It goes on for a while so that the reply looks like prose that a model would write, with enough words per line to wrap.\n\n")
		switch i % 4 {
		case 1:
			fmt.Fprintf(&b, "- first point of %d\n- second point with `code`\n  - a nested point\n- third point\n\n", i)
			fmt.Fprintf(&b, "1. step one\n2. step two\n3. step three of %d\n\n", i)
		case 2:
			fmt.Fprintf(&b, "- [x] done item %d\n- [ ] open item %d\n\n", i, i)
		case 3:
			fmt.Fprintf(&b, "| name | value | note |\n| --- | ---: | --- |\n| alpha | %d | first |\n| beta | %d | second |\n| gamma | %d | third |\n\n", i, i*2, i*3)
		case 0:
			b.WriteString("> A quoted line, as a reply might quote you.\n\n")
		}
		l := langs[i%len(langs)]
		code := l.code
		if strings.Contains(code, "%d") {
			code = fmt.Sprintf(code, i)
		}
		fmt.Fprintf(&b, "```%s\n%s\n```\n\n", l.name, code)
	}
	b.WriteString("The end.")
	return b.String()
}

// echo runs a call of the echo tool once it may run, printing its text word by word, and
// returns the text; a *service.Rejected error when it must not run.
func (a *Agent) echo(ctx context.Context, tool service.ToolHandle) (string, error) {
	args, err := tool.Approval(ctx)
	if err != nil {
		return "", err
	}
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(args), &in); err != nil {
		_ = tool.Finish("", fmt.Errorf("the arguments are not an object with a text: %v", err))
		return "", service.Errorf(service.EINVALID, "the echo tool got arguments it cannot read")
	}
	for i, w := range strings.SplitAfter(in.Text, " ") {
		if i > 0 { // the first word at once: the output starts when the call may run
			if err := pause(ctx, a.ChunkDelay); err != nil {
				return "", err
			}
		}
		if err := tool.Output(w); err != nil {
			return "", err
		}
	}
	return in.Text, tool.Finish(in.Text, nil)
}

// askMany asks n questions at once and waits for every answer; after a restart the
// questions answered meanwhile are in the history after the message.
func (a *Agent) askMany(ctx context.Context, out service.Output, n int, after []service.HistoryMessage) error {
	answers := make([]string, n)
	var waiting []int
	var pending []service.Pending
	for i := range n {
		prompt := fmt.Sprintf("Question %d of %d", i+1, n)
		if answer, ok := answerTo(after, prompt); ok {
			answers[i] = answer
			continue
		}
		p, err := out.Pose(service.QuestionSpec{Prompt: prompt})
		if err != nil {
			return err
		}
		waiting, pending = append(waiting, i), append(pending, p)
	}
	for j, p := range pending {
		answer, err := p.Wait(ctx)
		var withdrawn *service.Withdrawn
		switch {
		case errors.As(err, &withdrawn):
			answer = "(no answer: " + withdrawn.Reason + ")"
		case err != nil:
			return err
		}
		answers[waiting[j]] = answer
	}
	var b strings.Builder
	b.WriteString("Your answers:")
	for i, answer := range answers {
		fmt.Fprintf(&b, " %d. %s", i+1, answer)
	}
	return a.say(ctx, out, b.String())
}

// ask asks one question and waits for its answer; for a question withdrawn unanswered
// (it expired) it returns why instead, and the agent goes on.
func ask(ctx context.Context, out service.Output, q service.QuestionSpec) (answer, withdrawn string, err error) {
	p, err := out.Pose(q)
	if err != nil {
		return "", "", err
	}
	answer, err = p.Wait(ctx)
	if w := (*service.Withdrawn)(nil); errors.As(err, &w) {
		return "", w.Reason, nil
	}
	return answer, "", err
}

// answerTo finds the answer to the question prompt among the messages after the user's.
func answerTo(after []service.HistoryMessage, prompt string) (string, bool) {
	for _, m := range after {
		if m.Kind == service.KindAnswer && m.Question != nil && m.Question.Prompt == prompt {
			return m.Content, true
		}
	}
	return "", false
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

// TakesSteers implements service.Steerable: /slow takes a steer between two chunks and
// streams " [steered: <content>] " there; its other commands end before they would.
func (a *Agent) TakesSteers() bool { return true }
