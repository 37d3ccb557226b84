package main

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", ms(7), 50, 7 * time.Millisecond},
		{"one p99", ms(7), 99, 7 * time.Millisecond},
		{"median of two is the lower", ms(1, 2), 50, 1 * time.Millisecond},
		{"median of odd", ms(1, 2, 3), 50, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 99, 99 * time.Millisecond},
		{"p50 of 100 is the 50th", ms(hundred...), 50, 50 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 100, 100 * time.Millisecond},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"tiny p is the min", ms(1, 2, 3), 0.1, 1 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: percentile(p%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestSummarizeDoesNotSortItsInput(t *testing.T) {
	in := []time.Duration{30, 10, 20, 40}
	s := summarize(in)
	if s.N != 4 || s.P50 != 20 || s.P99 != 40 || s.Max != 40 || s.Mean != 25 {
		t.Errorf("summarize = %+v", s)
	}
	if in[0] != 30 || in[1] != 10 {
		t.Errorf("input reordered: %v", in)
	}
	if z := summarize(nil); z != (summary{}) {
		t.Errorf("summarize(nil) = %+v, want zero", z)
	}
}
