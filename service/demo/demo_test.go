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

func TestMarkdownTextHasAboutTheWordsAskedFor(t *testing.T) {
	for _, n := range []int{1, 300, 20000} {
		text := MarkdownText(n)
		words := countWords(text)
		if words < n || words > n+150 {
			t.Errorf("MarkdownText(%d) has %d words", n, words)
		}
		if !strings.HasSuffix(text, "\n\nThe end.") {
			t.Errorf("MarkdownText(%d) does not end with its last line: %q", n, text[max(0, len(text)-40):])
		}
		if MarkdownText(n) != text {
			t.Errorf("MarkdownText(%d) is not the same twice", n)
		}
	}
	text := MarkdownText(300)
	for _, want := range []string{"## Section 1\n", "| name | value | note |", "- [x] done item", "```go\n", "[a link to example 1](https://example.com/1)", "~~a struck word~~"} {
		if !strings.Contains(text, want) {
			t.Errorf("MarkdownText(300) lacks %q", want)
		}
	}
}
