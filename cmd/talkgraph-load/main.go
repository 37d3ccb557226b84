// Command talkgraph-load is talkgraph's load generator: point it at a deployment and it
// plays many users at once, each with their own session and websocket, checks every
// streamed reply for integrity and prints the figures.
//
// Usage:
//
//	go run ./cmd/talkgraph-load -url http://localhost:8080 -scenario paced -sessions 1000 -words 200 -pace 40
//	go run ./cmd/talkgraph-load -url http://localhost:8080 -scenario paced,burst,latency,cancel,idle -json
//	go run ./cmd/talkgraph-load -url http://localhost:8081,http://localhost:8082,http://localhost:8083 -cross -scenario cancel
//	go run ./cmd/talkgraph-load -compare /tmp/pair   # what scripts/loadpair.sh measured
//
// Scenarios (-scenario, comma-separated, or "all"):
//
//	paced    -sessions sessions (default 1000), each of its own user with one websocket
//	         subscribed from the session's streamCursor; once all are subscribed, one
//	         message each (over -ramp, issued -concurrency at a time) whose reply is -words
//	         words. Reports the time from the first send to the last reply completed, its
//	         ratio to the ideal -words/-pace seconds, the server's CPU per 1,000 words
//	         delivered, and first-chunk latency (addMessage sent -> first chunk seen).
//	burst    -sessions (default 1000) messages sent at the same instant, each by its own
//	         user; first-chunk latency. Replies are -short-words words.
//	latency  -sessions (default 1000) idle subscribed sessions; then -samples messages, one
//	         at a time, to random sessions, each waiting for its reply (-short-words words);
//	         first-chunk latency on a quiet server.
//	cancel   -sessions (default 200) sessions streaming "/slow 1000"; once each has seen
//	         -cancel-after chunks, cancelRun on each over -cancel-spread; reports cancelRun
//	         sent -> RunStatusChanged CANCELLED seen by the subscriber.
//	idle     -sessions (default 5000) idle subscriptions, each with its own session, user
//	         and connection; reports the server's RSS and goroutines per subscription, then
//	         closes them all and checks that the goroutines return to the baseline.
//	approval -sessions (default 100) idle subscribed sessions; then -samples times, one at
//	         a time, "/approve" to a random one, whose run waits for the decision on its
//	         tool call; once the request is seen, decideToolCall approves it. Reports
//	         decideToolCall sent -> the call's first output seen (the decision reached the
//	         waiting agent, which ran the tool) on a quiet server.
//	viewer   -sessions (default 1000) sessions as paced sets them up, each user also with a
//	         viewerEvents subscription on a websocket of its own. Reports the server's RSS
//	         and goroutines per viewer subscription (once steady, as idle does), then one
//	         message per session as paced: CPU per 1,000 words with the viewers on, and
//	         the viewers told of their run's end (each must be).
//
// Every user comes from this machine's address, so the server must be started with its
// per-address limits raised (ANON_RATE_LIMIT, MAX_SOCKETS_PER_ADDRESS,
// MAX_SUBSCRIPTIONS_PER_ADDRESS, MAX_BODY_READS_PER_ADDRESS...): docs/PERFORMANCE.md and
// scripts/loadpair.sh give the settings.
//
// Server figures (CPU, RSS, goroutines, GC cycles) come from the server's Prometheus
// /metrics, read before and after each scenario (-metrics, several URLs summed for several
// replicas).
// Several -url (replicas without a load balancer) share the sessions round robin; with
// -cross a session follows its stream on one replica and sends through the next, so that
// every message, chunk and stop crosses between replicas.
// With -pprof (the server's PPROF_ADDR listener) the server's CPU profile is recorded
// during each scenario's busy part, in one-second files that go tool pprof merges.
// The demo agent paces replies by the server's DEMO_CHUNK_DELAY (25ms = 40 words/s); runs
// execute on the server's WORKERS slots, so a server with fewer workers than sessions
// queues runs (the "peak runs waiting for a worker" figure shows it).
//
// Integrity checks, each an error that makes the exit status 1: every chunk must start
// where the message's text so far ends (no gap, no duplicate) and the deltas must add up
// to the completed content; a subscription the server completes, an error frame, or a
// websocket closed or broken without the client asking; a run that does not finish in
// -timeout (beyond its ideal duration); a run that ends in the wrong status. Exit status
// 0 means no errors, 2 a usage error.
//
// Tokens come from POST /auth/guest, or are minted locally for random users with the
// server's AUTH_SECRET (-auth-secret, with -auth-issuer and -auth-audience when the
// server sets them), which avoids guest sign-in's limits.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// config is what the flags say.
type config struct {
	URLs           []string
	Cross          bool
	Scenarios      []string
	Sessions       int
	Words          int
	ShortWords     int
	Pace           float64
	Ramp           time.Duration
	Samples        int
	CancelAfter    int
	CancelSpread   time.Duration
	Timeout        time.Duration
	Concurrency    int
	Agent          string
	AuthSecret     string
	AuthIssuer     string
	AuthAudience   string
	MetricsURLs    []string
	ScrapeInterval time.Duration
	Settle         time.Duration
	Trail          time.Duration
	GoroutineSlack int
	Pprof          string
	PprofDir       string
	DBPid          int
	JSON           bool
	Quiet          bool
	// Compare and CompareBase: print what scripts/loadpair.sh measured (see compare)
	// instead of running scenarios.
	Compare, CompareBase string
}

// scenarioNames lists the scenarios in the order "all" runs them.
var scenarioNames = []string{"paced", "burst", "latency", "cancel", "idle", "approval", "viewer"}

// defaultSessions is each scenario's number of sessions when -sessions is 0.
var defaultSessions = map[string]int{"paced": 1000, "burst": 1000, "latency": 1000, "cancel": 200, "idle": 5000, "approval": 100, "viewer": 1000}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("talkgraph-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var scenarios, metrics, urls string
	fs.StringVar(&urls, "url", "http://localhost:8080", "the server's base URL; several, comma-separated, for replicas: session i uses the i-th (round robin)")
	fs.BoolVar(&c.Cross, "cross", false, "with several -url: each session subscribes on one replica and sends its messages and stops through the next")
	fs.StringVar(&scenarios, "scenario", "paced", "scenarios to run, comma-separated: "+strings.Join(scenarioNames, ", ")+", or all")
	fs.IntVar(&c.Sessions, "sessions", 0, "sessions (one user and one websocket each); 0: the scenario's default (paced, burst, latency, viewer 1000; cancel 200; idle 5000; approval 100)")
	fs.IntVar(&c.Words, "words", 200, "words in each paced reply (at least 3: the demo agent answers X with \"You said: X\")")
	fs.IntVar(&c.ShortWords, "short-words", 10, "words in each burst and latency reply (at least 3)")
	fs.Float64Var(&c.Pace, "pace", 40, "the agent's words per second (the server's 1/DEMO_CHUNK_DELAY), for the paced ideal time")
	fs.DurationVar(&c.Ramp, "ramp", 0, "spread the paced messages over this long (0: all at once, -concurrency at a time)")
	fs.IntVar(&c.Samples, "samples", 200, "latency and approval: messages sent one at a time")
	fs.IntVar(&c.CancelAfter, "cancel-after", 3, "cancel: chunks each run streams before it is cancelled")
	fs.DurationVar(&c.CancelSpread, "cancel-spread", 2*time.Second, "cancel: spread the cancelRun calls over this long")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "deadline of a run beyond its ideal duration, and of each request and connection")
	fs.IntVar(&c.Concurrency, "concurrency", 64, "HTTP requests and connection setups in flight at once")
	fs.StringVar(&c.Agent, "agent", "demo", "the sessions' agent (replies are checked word for word only with demo)")
	fs.StringVar(&c.AuthSecret, "auth-secret", "", "the server's AUTH_SECRET: mint tokens for random users instead of POST /auth/guest")
	fs.StringVar(&c.AuthIssuer, "auth-issuer", "", "the server's AUTH_ISSUER, for minted tokens")
	fs.StringVar(&c.AuthAudience, "auth-audience", "", "the server's AUTH_AUDIENCE, for minted tokens")
	fs.StringVar(&metrics, "metrics", "", "the server's /metrics URLs, comma-separated, summed (default: -url + /metrics; \"none\" for none)")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", time.Second, "how often /metrics is read during a scenario for the peaks (0: only before and after)")
	fs.DurationVar(&c.Settle, "settle", time.Minute, "idle: longest wait for RSS to stop growing, and for goroutines to return after closing")
	fs.DurationVar(&c.Trail, "trail", 1500*time.Millisecond, "wait after a scenario's last reply before reading the server's CPU, so that work it does in the background (folding finished replies) counts")
	fs.IntVar(&c.GoroutineSlack, "goroutine-slack", 20, "idle: goroutines above the baseline still counted as returned")
	fs.StringVar(&c.Pprof, "pprof", "", "the server's pprof listener (its PPROF_ADDR), e.g. http://127.0.0.1:6061: record the server's CPU profile during each scenario's busy part")
	fs.StringVar(&c.PprofDir, "pprof-dir", ".", "where -pprof saves the profiles (made if missing), one-second each, as SCENARIO-NNN.pprof (go tool pprof reads them together)")
	fs.IntVar(&c.DBPid, "db-pid", 0, "the database server's process ID (PostgreSQL's postmaster, on this machine): its CPU and its children's is read with the server's and reported beside it")
	fs.BoolVar(&c.JSON, "json", false, "print the figures and errors as JSON instead of a table")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress lines on stderr")
	fs.StringVar(&c.Compare, "compare", "", "instead of running scenarios, compare the runs scripts/loadpair.sh left in this directory: each build's median and range per figure, and its ratio to -compare-base")
	fs.StringVar(&c.CompareBase, "compare-base", "", "with -compare: the build the others are compared with (default: the first by name)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: talkgraph-load [flags]   (see go doc ./cmd/talkgraph-load)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
		case s == "all":
			c.Scenarios = append(c.Scenarios, scenarioNames...)
		case slices.Contains(scenarioNames, s):
			c.Scenarios = append(c.Scenarios, s)
		default:
			return c, fmt.Errorf("unknown scenario %q (want %s or all)", s, strings.Join(scenarioNames, ", "))
		}
	}
	if len(c.Scenarios) == 0 {
		return c, fmt.Errorf("no scenario given")
	}
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			c.URLs = append(c.URLs, u)
		}
	}
	if len(c.URLs) == 0 {
		return c, fmt.Errorf("no -url given")
	}
	c.Pprof = strings.TrimRight(c.Pprof, "/")
	switch {
	case metrics == "none":
	case metrics == "":
		for _, u := range c.URLs {
			c.MetricsURLs = append(c.MetricsURLs, u+"/metrics")
		}
	default:
		for _, u := range strings.Split(metrics, ",") {
			if u = strings.TrimSpace(u); u != "" {
				c.MetricsURLs = append(c.MetricsURLs, u)
			}
		}
	}
	switch {
	case c.Sessions < 0:
		return c, fmt.Errorf("-sessions must not be negative")
	case c.Words < 3 || c.ShortWords < 3:
		return c, fmt.Errorf("-words and -short-words must be at least 3")
	case c.Pace <= 0:
		return c, fmt.Errorf("-pace must be positive")
	case c.Samples < 1:
		return c, fmt.Errorf("-samples must be at least 1")
	case c.Concurrency < 1:
		return c, fmt.Errorf("-concurrency must be at least 1")
	case c.Timeout <= 0:
		return c, fmt.Errorf("-timeout must be positive")
	case c.CancelAfter < 1:
		return c, fmt.Errorf("-cancel-after must be at least 1")
	}
	return c, nil
}

// sessionsFor is the number of sessions scenario runs with.
func (c config) sessionsFor(scenario string) int {
	if c.Sessions > 0 {
		return c.Sessions
	}
	return defaultSessions[scenario]
}

// figure is one measured value of a scenario.
type figure struct {
	Scenario string  `json:"scenario"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit,omitempty"`
}

// report collects the figures of every scenario in the order they were measured.
type report struct {
	mu      sync.Mutex
	figures []figure
}

func (r *report) add(scenario, name string, value float64, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figures = append(r.figures, figure{Scenario: scenario, Name: name, Value: value, Unit: unit})
}

// latency adds the number of samples and, when there are some, their p50, p99 and max
// in milliseconds.
func (r *report) latency(scenario, name string, s summary) {
	r.add(scenario, name+" samples", float64(s.N), "")
	if s.N == 0 {
		return
	}
	for _, f := range []struct {
		q string
		d time.Duration
	}{{"p50", s.P50}, {"p99", s.P99}, {"max", s.Max}} {
		r.add(scenario, name+" "+f.q, float64(f.d)/float64(time.Millisecond), "ms")
	}
}

// errorLog counts errors by scenario and kind and keeps a few examples of each.
type errorLog struct {
	mu    sync.Mutex
	kinds []*errorKind
	index map[[2]string]*errorKind
}

// errorKind is one kind of error of one scenario.
type errorKind struct {
	Scenario string   `json:"scenario"`
	Error    string   `json:"error"`
	Count    int      `json:"count"`
	Examples []string `json:"examples"`
}

const examplesKept = 3

func newErrorLog() *errorLog { return &errorLog{index: map[[2]string]*errorKind{}} }

// add records one error of a kind (a short, fixed text) with its detail.
func (l *errorLog) add(scenario, kind, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.index[[2]string{scenario, kind}]
	if k == nil {
		k = &errorKind{Scenario: scenario, Error: kind}
		l.index[[2]string{scenario, kind}] = k
		l.kinds = append(l.kinds, k)
	}
	k.Count++
	if len(k.Examples) < examplesKept {
		k.Examples = append(k.Examples, detail)
	}
}

// list returns a copy of the kinds seen, in the order first seen.
func (l *errorLog) list() []errorKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]errorKind, len(l.kinds))
	for i, k := range l.kinds {
		out[i] = *k
		out[i].Examples = slices.Clone(k.Examples)
	}
	return out
}

// total is the number of errors of a scenario ("" for all).
func (l *errorLog) total(scenario string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, k := range l.kinds {
		if scenario == "" || k.Scenario == scenario {
			n += k.Count
		}
	}
	return n
}

// formatValue prints a figure's value with its unit.
func formatValue(f figure) string {
	var v string
	switch {
	case f.Unit == "ms" || f.Unit == "s" || f.Unit == "x":
		v = strconv.FormatFloat(f.Value, 'f', 2, 64)
	case f.Value == float64(int64(f.Value)):
		v = strconv.FormatInt(int64(f.Value), 10)
	default:
		v = strconv.FormatFloat(f.Value, 'f', 2, 64)
	}
	if f.Unit != "" {
		v += " " + f.Unit
	}
	return v
}

// printTable writes the figures as a table, then the errors.
func printTable(w io.Writer, figs []figure, errs []errorKind) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tfigure\tvalue")
	for _, f := range figs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Scenario, f.Name, formatValue(f))
	}
	tw.Flush()
	total := 0
	for _, e := range errs {
		total += e.Count
	}
	if total == 0 {
		fmt.Fprintln(w, "\nerrors: none")
		return
	}
	fmt.Fprintf(w, "\nerrors: %d\n", total)
	for _, e := range errs {
		fmt.Fprintf(w, "  %s: %s ×%d\n", e.Scenario, e.Error, e.Count)
		for _, ex := range e.Examples {
			fmt.Fprintf(w, "      e.g. %s\n", ex)
		}
	}
}

// printJSON writes the figures and errors as one JSON object.
func printJSON(w io.Writer, figs []figure, errs []errorKind) error {
	total := 0
	for _, e := range errs {
		total += e.Count
	}
	if figs == nil {
		figs = []figure{}
	}
	if errs == nil {
		errs = []errorKind{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"ok": total == 0, "errorCount": total, "figures": figs, "errors": errs})
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its outputs and exit status, for a deferred-friendly main.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(stderr, "talkgraph-load:", err)
		}
		return 2
	}
	if cfg.Compare != "" {
		if err := compare(stdout, cfg.Compare, cfg.CompareBase); err != nil {
			fmt.Fprintln(stderr, "talkgraph-load:", err)
			return 1
		}
		return 0
	}
	progress := func(format string, a ...any) {
		if !cfg.Quiet {
			fmt.Fprintf(stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
		}
	}
	if limit, err := raiseFileLimit(); err != nil {
		progress("could not raise the open-file limit: %v", err)
	} else if limit > 0 {
		progress("open-file limit %d", limit)
	}
	var cls []*client
	for _, u := range cfg.URLs {
		cl, err := newClient(u, cfg.Timeout, 4*cfg.Concurrency)
		if err != nil {
			fmt.Fprintln(stderr, "talkgraph-load:", err)
			return 2
		}
		if cfg.AuthSecret != "" {
			cl.secret = []byte(cfg.AuthSecret)
			cl.issuer, cl.audience = cfg.AuthIssuer, cfg.AuthAudience
		}
		cls = append(cls, cl)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r := &runner{
		cfg:  cfg,
		cls:  cls,
		sc:   &scraper{urls: cfg.MetricsURLs, http: &http.Client{Timeout: 30 * time.Second}},
		rep:  &report{},
		errs: newErrorLog(),
		log:  progress,
	}
	for _, s := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		r.run(ctx, s)
	}
	if ctx.Err() != nil {
		r.errs.add("all", "interrupted", "stopped by a signal before the end")
	}
	errs := r.errs.list()
	if cfg.JSON {
		if err := printJSON(stdout, r.rep.figures, errs); err != nil {
			fmt.Fprintln(stderr, "talkgraph-load:", err)
			return 1
		}
	} else {
		printTable(stdout, r.rep.figures, errs)
	}
	if r.errs.total("") > 0 {
		return 1
	}
	return 0
}
