package shrink

import "testing"

func TestMapIsMadeAnewOnceMostEntriesHaveGone(t *testing.T) {
	m := map[int]string{}
	for i := range 4000 {
		m[i] = "v"
	}
	peak := len(m)
	for i := range 3000 {
		delete(m, i)
	}
	// 1,000 left of 4,000: a quarter, not fewer.
	if got, p := Map(m, peak); p != peak || len(got) != 1000 {
		t.Fatalf("made anew at a quarter of the peak (peak %d, %d entries)", p, len(got))
	}
	delete(m, 3000)
	got, p := Map(m, peak)
	if p != 999 || len(got) != 999 || got[3999] != "v" {
		t.Fatalf("below a quarter: peak %d, %d entries; want a copy of the 999 with the peak at 999", p, len(got))
	}
	got[-1] = "new"
	if _, ok := m[-1]; ok {
		t.Error("the new map is the old one")
	}
	small := map[int]bool{1: true}
	if _, p := Map(small, Min-1); p != Min-1 {
		t.Error("a map that never held Min entries was made anew")
	}
}
