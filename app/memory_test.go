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
	// counts at each tick, whether the janitor releases then, and whether the store's
	// caches go too (only when a crowd left)
	for i, step := range []struct {
		n          int64
		want, left bool
	}{
		{0, false, false},
		{3000, false, false}, // arriving
		{5000, false, false}, // still arriving
		{5000, true, false},  // stays: release, the caches kept for the crowd
		{5000, true, false},  // still stays: once more
		{5000, false, false}, // nothing new
		{5010, false, false}, // small churn
		{0, false, false},    // leaving
		{0, true, true},      // left: release, the store's caches too
		{2000, false, false}, // moved at the tick after: no second release
		{2000, true, false},  // a crowd of 2,000 stays
		{2000, true, false},
		{500, false, false}, // 1,500 leave
		{500, true, true},
		{500, true, false}, // the second release leaves the store alone
	} {
		release, left := j.tick(step.n)
		if release != step.want || left != step.left {
			t.Errorf("tick %d (count %d): release %v, store %v; want %v, %v", i, step.n, release, left, step.want, step.left)
		}
	}
}
