package app

import "testing"

func TestShouldRelease(t *testing.T) {
	for _, c := range []struct {
		what              string
		released, prev, n int64
		want              bool
	}{
		{"a crowd arrived and stays", 0, 5000, 5000, true},
		{"a crowd is still arriving", 0, 3000, 5000, false},
		{"a crowd left and the count stays", 5000, 0, 0, true},
		{"a crowd is still leaving", 5000, 2500, 0, false},
		{"fewer than releaseAfter came", 0, 999, 999, false},
		{"nothing moved since the last release", 5000, 5000, 5000, false},
		{"small churn around a steady count", 5000, 5040, 5000, false},
	} {
		if got := shouldRelease(c.released, c.prev, c.n); got != c.want {
			t.Errorf("%s (released at %d, %d then %d): %v, want %v", c.what, c.released, c.prev, c.n, got, c.want)
		}
	}
}

func TestJanitorReleasesTwiceAfterACrowd(t *testing.T) {
	var j janitor
	// counts at each tick, and whether the janitor releases then
	for i, step := range []struct {
		n    int64
		want bool
	}{
		{0, false},
		{3000, false}, // arriving
		{5000, false}, // still arriving
		{5000, true},  // stays: release
		{5000, true},  // still stays: once more
		{5000, false}, // nothing new
		{5010, false}, // small churn
		{0, false},    // leaving
		{0, true},     // left: release
		{2000, false}, // moved at the tick after: no second release
		{2000, true},  // a crowd of 2,000 stays
		{2000, true},
	} {
		if got := j.tick(step.n); got != step.want {
			t.Errorf("tick %d (count %d): release %v, want %v", i, step.n, got, step.want)
		}
	}
}
