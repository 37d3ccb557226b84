package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metric names read from the server's /metrics.
const (
	metricCPU           = "process_cpu_seconds_total"
	metricRSS           = "process_resident_memory_bytes"
	metricGoroutines    = "go_goroutines"
	metricGCCycles      = "go_gc_duration_seconds_count"
	metricSubscriptions = "talkgraph_subscriptions_active"
	metricRunsWaiting   = "talkgraph_runs_waiting_for_slot"
	metricRunsExecuting = "talkgraph_runs_executing"
)

// sample is one series of a Prometheus text exposition: a metric name, its labels and
// its value.
type sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// snapshot is what one scrape of every /metrics URL read, the series of all of them
// together, with the time of the scrape.
type snapshot struct {
	At      time.Time
	Samples []sample
}

// sum adds up the values of every series called name whose labels include all the
// given label pairs (name, value, name, value, ...), over all replicas. ok is false
// when no series matched.
func (s snapshot) sum(name string, labels ...string) (total float64, ok bool) {
next:
	for _, smp := range s.Samples {
		if smp.Name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if smp.Labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		total += smp.Value
		ok = true
	}
	return total, ok
}

// value is sum without the ok: 0 when nothing matched.
func (s snapshot) value(name string, labels ...string) float64 {
	v, _ := s.sum(name, labels...)
	return v
}

// parsePrometheus reads the Prometheus text exposition format (version 0.0.4): one
// sample a line, `name{label="value",...} value [timestamp]`, with # comments and blank
// lines skipped. Label values may hold the escapes \\, \" and \n.
func parsePrometheus(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		smp, err := parseSampleLine(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, smp)
	}
	return out, sc.Err()
}

// parseSampleLine parses one non-comment line of the text format.
func parseSampleLine(text string) (sample, error) {
	var smp sample
	i := 0
	for i < len(text) && isNameChar(text[i], i == 0) {
		i++
	}
	if i == 0 {
		return smp, fmt.Errorf("no metric name in %q", text)
	}
	smp.Name = text[:i]
	rest := text[i:]
	if strings.HasPrefix(rest, "{") {
		labels, n, err := parseLabels(rest)
		if err != nil {
			return smp, fmt.Errorf("%s: %w", smp.Name, err)
		}
		smp.Labels = labels
		rest = rest[n:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return smp, fmt.Errorf("%s: want a value and an optional timestamp, got %q", smp.Name, rest)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return smp, fmt.Errorf("%s: bad value %q", smp.Name, fields[0])
	}
	smp.Value = v
	return smp, nil
}

func isNameChar(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == ':':
		return true
	case c >= '0' && c <= '9':
		return !first
	}
	return false
}

// parseLabels parses `{a="x",b="y"}` at the start of s and returns the labels and the
// number of bytes read, the closing brace included.
func parseLabels(s string) (map[string]string, int, error) {
	labels := map[string]string{}
	i := 1 // past {
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated labels")
		}
		if s[i] == '}' {
			return labels, i + 1, nil
		}
		start := i
		for i < len(s) && isNameChar(s[i], i == start) {
			i++
		}
		name := s[start:i]
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if name == "" || i >= len(s) || s[i] != '=' {
			return nil, 0, fmt.Errorf("bad label at %q", s[start:])
		}
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) || s[i] != '"' {
			return nil, 0, fmt.Errorf("bad label at %q", s[start:])
		}
		i++
		var val strings.Builder
		for {
			if i >= len(s) {
				return nil, 0, fmt.Errorf("unterminated value of label %s", name)
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default: // \\ and \"
					val.WriteByte(s[i])
				}
				i++
				continue
			}
			val.WriteByte(c)
			i++
		}
		labels[name] = val.String()
	}
}

// scraper reads the /metrics of every replica of the server.
type scraper struct {
	urls []string
	http *http.Client
}

// enabled reports whether there is anything to scrape.
func (s *scraper) enabled() bool { return s != nil && len(s.urls) > 0 }

// scrape reads every URL; the series of all of them go in one snapshot, so sums add up
// the replicas.
func (s *scraper) scrape(ctx context.Context) (snapshot, error) {
	snap := snapshot{At: time.Now()}
	for _, u := range s.urls {
		smps, err := s.scrapeOne(ctx, u)
		if err != nil {
			return snap, err
		}
		snap.Samples = append(snap.Samples, smps...)
	}
	return snap, nil
}

func (s *scraper) scrapeOne(ctx context.Context, u string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	// Uncompressed: the server's gzip of every scrape would count in the CPU measured.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: HTTP %s", u, resp.Status)
	}
	smps, err := parsePrometheus(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", u, err)
	}
	return smps, nil
}

// peaks are the highest values the sampler saw while a scenario ran.
type peaks struct {
	RSS, Goroutines, RunsWaiting, RunsExecuting float64
	Scrapes                                     int
}

// sampler scrapes the server in the background every interval and keeps the peaks.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	p    peaks
}

// startSampler starts scraping every interval until stopped; nil when s is not enabled
// or the interval is not positive.
func startSampler(ctx context.Context, s *scraper, interval time.Duration) *sampler {
	if !s.enabled() || interval <= 0 {
		return nil
	}
	sm := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sm.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-sm.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			snap, err := s.scrape(ctx)
			if err != nil {
				continue // the before and after scrapes report failures
			}
			sm.note(snap)
		}
	}()
	return sm
}

func (sm *sampler) note(snap snapshot) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.p.RSS = max(sm.p.RSS, snap.value(metricRSS))
	sm.p.Goroutines = max(sm.p.Goroutines, snap.value(metricGoroutines))
	sm.p.RunsWaiting = max(sm.p.RunsWaiting, snap.value(metricRunsWaiting))
	sm.p.RunsExecuting = max(sm.p.RunsExecuting, snap.value(metricRunsExecuting))
	sm.p.Scrapes++
}

// finish stops the sampler and returns the peaks, counting the last snapshot too.
func (sm *sampler) finish(last snapshot) peaks {
	if sm == nil {
		return peaks{}
	}
	close(sm.stop)
	<-sm.done
	sm.note(last)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.p
}
