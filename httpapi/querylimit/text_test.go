package querylimit

import "testing"

// A lone surrogate is found in "…" strings only, with escaped backslashes and valid pairs
// told apart from it.
func TestLoneSurrogate(t *testing.T) {
	for q, want := range map[string]string{
		`{ a(s: "x") }`:                               "",
		`mutation { m(c: "\ud800") }`:                 `\ud800`,
		`mutation { m(c: "ok \uDC00 after") }`:        `\uDC00`,
		`mutation { m(c: "\ud83d\ude00 pair") }`:      "",
		`mutation { m(c: "\ud83d\u0041") }`:           `\ud83d`,
		`mutation { m(c: "\\ud800 is text") }`:        "",
		`mutation { m(c: "\"\ud800") }`:               `\ud800`,
		"# \\ud800 in a comment\n{ a }":               "",
		`{ a(s: """ \ud800 in a block string """) }`:  "",
		`{ a(s: """ \""" \ud800 """, t: "\udfff") }`:  `\udfff`,
		`{ a(s: "\u00e9 then \ud800") }`:              `\ud800`,
		`{ a(s: "unterminated \ud800`:                 `\ud800`,
		`{ a(s: """unterminated \ud800`:               "",
		`{ a(s: "\u12") b(s: "\ud800") }`:             `\ud800`,
		"{ a(s: \"line\n\\ud800\") }":                 "",
		`{ a(s: "\ud800\ud800") }`:                    `\ud800`,
		`{ a(s: "\uDBFF\uDFFF max") b(s: "\ud800") }`: `\ud800`,
	} {
		if got := loneSurrogate(q); got != want {
			t.Errorf("loneSurrogate(%q) = %q, want %q", q, got, want)
		}
	}
	if checkText("{ a(s: \"\xff\") }") == nil {
		t.Error("a query that is not valid UTF-8 passed")
	}
}
