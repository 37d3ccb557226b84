package main

import (
	"math"
	"strings"
	"testing"
)

const exposition = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
process_resident_memory_bytes 3.3554432e+07

talkgraph_runs_finished_total{status="COMPLETED"} 10
talkgraph_runs_finished_total{status="CANCELLED"} 3
talkgraph_operation_duration_seconds_bucket{type="mutation",le="+Inf"} 7
talkgraph_operation_duration_seconds_sum{type="mutation"} 0.25 1700000000000
weird{a="x\"y\\z\nw",b="",c="{},="} 1
go_gc_duration_seconds{quantile="0.5"} NaN
with_space_labels{ a = "1" } -Inf
`

func TestParsePrometheus(t *testing.T) {
	smps, err := parsePrometheus(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot{Samples: smps}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"go_goroutines", nil, 42},
		{"process_cpu_seconds_total", nil, 12.5},
		{"process_resident_memory_bytes", nil, 32 << 20},
		{"talkgraph_runs_finished_total", nil, 13},
		{"talkgraph_runs_finished_total", []string{"status", "CANCELLED"}, 3},
		{"talkgraph_operation_duration_seconds_bucket", []string{"le", "+Inf"}, 7},
		{"talkgraph_operation_duration_seconds_sum", []string{"type", "mutation"}, 0.25},
	}
	for _, c := range checks {
		got, ok := snap.sum(c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("sum(%s, %v) = %v, %v; want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := snap.sum("absent"); ok {
		t.Error("sum(absent) found something")
	}
	if _, ok := snap.sum("talkgraph_runs_finished_total", "status", "FAILED"); ok {
		t.Error("a label that matches nothing matched")
	}
	weird, ok := snap.sum("weird", "a", "x\"y\\z\nw", "b", "", "c", "{},=")
	if !ok || weird != 1 {
		t.Errorf("escaped labels: %v %v", weird, ok)
	}
	if v, _ := snap.sum("go_gc_duration_seconds"); !math.IsNaN(v) {
		t.Errorf("NaN value = %v", v)
	}
	if v, _ := snap.sum("with_space_labels", "a", "1"); !math.IsInf(v, -1) {
		t.Errorf("-Inf value = %v", v)
	}
}

func TestSnapshotSumsReplicas(t *testing.T) {
	var all []sample
	for _, text := range []string{"process_cpu_seconds_total 1.5\ngo_goroutines 10\n", "process_cpu_seconds_total 2\ngo_goroutines 5\n"} {
		smps, err := parsePrometheus(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, smps...)
	}
	snap := snapshot{Samples: all}
	if v := snap.value(metricCPU); v != 3.5 {
		t.Errorf("cpu over two replicas = %v, want 3.5", v)
	}
	if v := snap.value(metricGoroutines); v != 15 {
		t.Errorf("goroutines over two replicas = %v, want 15", v)
	}
}

func TestParsePrometheusRejectsGarbage(t *testing.T) {
	for _, bad := range []string{
		"no_value\n",
		"x{a=\"1\" 2\n",
		"x{a=1} 2\n",
		"x notanumber\n",
		"x 1 2 3\n",
		"{a=\"1\"} 2\n",
	} {
		if _, err := parsePrometheus(strings.NewReader(bad)); err == nil {
			t.Errorf("parsePrometheus(%q) succeeded", bad)
		}
	}
}
