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
