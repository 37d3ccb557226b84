package main

import (
	"math"
	"slices"
	"time"
)

// summary describes a set of latencies: how many, the median, the 99th percentile, the
// largest and the mean.
type summary struct {
	N    int
	P50  time.Duration
	P99  time.Duration
	Max  time.Duration
	Mean time.Duration
}

// summarize sorts a copy of ds and summarizes it; the zero summary for none.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var total time.Duration
	for _, d := range sorted {
		total += d
	}
	return summary{
		N:    len(sorted),
		P50:  percentile(sorted, 50),
		P99:  percentile(sorted, 99),
		Max:  sorted[len(sorted)-1],
		Mean: total / time.Duration(len(sorted)),
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted values by the
// nearest-rank method: the smallest value with at least p% of the values at or below it,
// so it is always one of the values (never interpolated). Zero for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(len(sorted)) / 100)) // p*n first: exact for whole p
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}
