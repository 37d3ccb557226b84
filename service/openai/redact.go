package openai

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/talkgraph/talkgraph/service"
)

// secret is the API key and the forms in which a provider, a proxy or a transport error
// may echo it: URL-escaped (as a query value and as a path segment, with upper- or
// lower-case hex), and base64 in the standard and URL alphabets, padded or not, of the key
// and of "Bearer <key>"; also the part of the key's base64 that any longer base64 text
// holding the key carries (an encoded "Authorization: Bearer <key>", "user:<key>"). A
// nil *secret (no key) redacts nothing.
//
// redact is applied to every string that leaves the package and may have come from the
// provider or the transport: a hostile or buggy server can echo the key in a body, and a
// URL in an error can carry it in its query.
type secret struct {
	forms    []string // longest first
	replacer *strings.Replacer
}

// minForm is the shortest encoded form kept: shorter ones (the base64 of a short key
// seen at an offset) would be found in ordinary text.
const minForm = 8

func newSecret(key string) *secret {
	if key == "" {
		return nil
	}
	forms := []string{key}
	for _, k := range []string{key, "Bearer " + key} {
		q, p := url.QueryEscape(k), url.PathEscape(k)
		forms = append(forms, q, p, lowerHex(q), lowerHex(p))
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			forms = append(forms, enc.EncodeToString([]byte(k)))
		}
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for lead := range 3 {
			if f := base64Core(enc, key, lead); len(f) >= minForm {
				forms = append(forms, f)
			}
		}
	}
	slices.SortFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	forms = slices.Compact(forms)
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, "[redacted]")
	}
	return &secret{forms: forms, replacer: strings.NewReplacer(pairs...)}
}

// base64Core returns the characters of the base64 of key, placed lead bytes into a longer
// text, that depend on the key's bytes only: the same in any text that holds the key there.
func base64Core(enc *base64.Encoding, key string, lead int) string {
	s := enc.EncodeToString(append(make([]byte, lead), key...))
	from := (8*lead + 5) / 6          // the first character with no bit of the lead
	to := (8 * (lead + len(key))) / 6 // past the last character with no bit after the key
	if to <= from {
		return ""
	}
	return s[from:to]
}

var escapedHex = regexp.MustCompile(`%[0-9A-F]{2}`)

// lowerHex writes the escapes of an escaped text with lower-case hex digits, as some
// encoders do.
func lowerHex(s string) string { return escapedHex.ReplaceAllStringFunc(s, strings.ToLower) }

// redact removes every form of the key from s.
func (k *secret) redact(s string) string {
	if k == nil {
		return s
	}
	return k.replacer.Replace(s)
}

// overlap returns the length of the longest suffix of s that is a proper prefix of one of
// the key's forms.
func (k *secret) overlap(s string) int {
	if k == nil {
		return 0
	}
	n := 0
	for _, f := range k.forms {
		for i := min(len(s), len(f)-1); i > n; i-- {
			if strings.HasSuffix(s, f[:i]) {
				n = i
				break
			}
		}
	}
	return n
}

// guardedOutput keeps the API key out of everything written to the service's Output: the
// model's text, tool arguments, what tools print (a shell can print the environment),
// results and questions. A provider that echoes the key, or a command that prints it,
// shows "[redacted]" instead.
//
// Streamed text is redacted across deltas: a delta ending with what could be the start of
// the key is held back until the next one shows it is not. flush releases what is held.
type guardedOutput struct {
	out service.Output
	key *secret

	mu   sync.Mutex
	text streamRedactor
}

func guard(out service.Output, key *secret) *guardedOutput {
	return &guardedOutput{out: out, key: key, text: streamRedactor{key: key}}
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
		cs = append(cs, g.key.redact(c))
	}
	return g.out.Ask(ctx, g.key.redact(prompt), cs)
}

func (g *guardedOutput) Pose(q service.QuestionSpec) (service.Pending, error) {
	if err := g.flush(); err != nil {
		return nil, err
	}
	q.Prompt = g.key.redact(q.Prompt)
	if q.Choices != nil {
		cs := make([]string, len(q.Choices))
		for i, c := range q.Choices {
			cs[i] = g.key.redact(c)
		}
		q.Choices = cs
	}
	return g.out.Pose(q)
}

func (g *guardedOutput) StartTool(id, name, arguments string, opts ...service.ToolOption) (service.ToolHandle, error) {
	if err := g.flush(); err != nil {
		return nil, err
	}
	h, err := g.out.StartTool(id, name, g.key.redact(arguments), opts...)
	if err != nil {
		return nil, err
	}
	return &guardedHandle{h: h, key: g.key, output: streamRedactor{key: g.key}}, nil
}

func (g *guardedOutput) ReportUsage(model string, u service.Usage) error {
	return g.out.ReportUsage(model, u)
}

// BeforeModelCall writes out the text held back first: a run held by a budget completes
// the reply so far.
func (g *guardedOutput) BeforeModelCall(ctx context.Context, estimate int) error {
	if err := g.flush(); err != nil {
		return err
	}
	return g.out.BeforeModelCall(ctx, estimate)
}

// Steers writes out the text held back first: it belongs to the reply before the steer.
func (g *guardedOutput) Steers() ([]service.Message, error) {
	if err := g.flush(); err != nil {
		return nil, err
	}
	return g.out.Steers()
}

type guardedHandle struct {
	h   service.ToolHandle
	key *secret

	mu     sync.Mutex
	output streamRedactor
}

func (g *guardedHandle) ID() string { return g.h.ID() }

func (g *guardedHandle) Approval(ctx context.Context) (string, error) { return g.h.Approval(ctx) }

func (g *guardedHandle) AwaitsApproval() bool { return g.h.AwaitsApproval() }

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
		err = errors.New(g.key.redact(err.Error()))
	}
	return g.h.Finish(g.key.redact(result), err)
}

// streamRedactor removes the key from a text that arrives in pieces.
type streamRedactor struct {
	key  *secret
	held string
}

// push returns what of the text so far can be released.
func (r *streamRedactor) push(delta string) string {
	if r.key == nil {
		return delta
	}
	s := r.key.redact(r.held + delta)
	k := r.key.overlap(s)
	r.held = s[len(s)-k:]
	return s[:len(s)-k]
}

// flush releases what is held: the text ended, so it cannot be the key.
func (r *streamRedactor) flush() string {
	s := r.held
	r.held = ""
	return s
}
