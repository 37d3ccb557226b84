package querylimit

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/talkgraph/talkgraph/service"
)

// checkText refuses a query whose text is not valid UTF-8, or whose string literals hold a
// \u escape of a lone UTF-16 surrogate (\ud800): the parser would take either as U+FFFD, and
// a message would be stored with it. (Block strings and comments take no escapes.)
func checkText(query string) error {
	if !utf8.ValidString(query) {
		return service.Errorf(service.EINVALID, "the query is not valid UTF-8")
	}
	if e := loneSurrogate(query); e != "" {
		return service.Errorf(service.EINVALID, "a string in the query holds a lone UTF-16 surrogate (%s), which is not a character", e)
	}
	return nil
}

// loneSurrogate returns the first escape of a lone surrogate in the string literals of q,
// or "". It follows GraphQL's lexical grammar as far as strings go: "…" strings (with
// escapes, on one line), """…""" block strings (no escapes but \""") and # comments.
func loneSurrogate(q string) string {
	if !strings.Contains(q, `\u`) {
		return ""
	}
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case '#':
			for i < len(q) && q[i] != '\n' && q[i] != '\r' {
				i++
			}
		case '"':
			if strings.HasPrefix(q[i:], `"""`) {
				i += 3
				for i < len(q) && !strings.HasPrefix(q[i:], `"""`) {
					if strings.HasPrefix(q[i:], `\"""`) {
						i += 3
					}
					i++
				}
				i += 2 // to the last quote; the loop steps past it
				continue
			}
			for i++; i < len(q) && q[i] != '"' && q[i] != '\n' && q[i] != '\r'; i++ {
				if q[i] != '\\' {
					continue
				}
				r, ok := escaped(q[i:])
				if !ok || !utf16.IsSurrogate(r) {
					i++ // past the escaped character (the rest of \uXXXX is plain text)
					continue
				}
				if r2, ok := escaped(q[i+6:]); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
					i += 11
					continue
				}
				return q[i : i+6]
			}
		}
	}
	return ""
}

// escaped reads the escape \uXXXX that s starts with.
func escaped(s string) (rune, bool) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[2:6]) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
