package demo

import (
	"strings"
	"testing"
)

func TestCountWordsCountsAsFieldsDoes(t *testing.T) {
	for _, s := range []string{"", " ", "word", "word ", " two words ", "tab\tand\nnewline", "a\u00a0b", "ünïcödé wörds  ", "\u3000全角\u3000space"} {
		if got, want := countWords(s), len(strings.Fields(s)); got != want {
			t.Errorf("countWords(%q) = %d, want %d", s, got, want)
		}
	}
}
