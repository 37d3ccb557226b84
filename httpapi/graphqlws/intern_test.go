package graphqlws

import (
	"strings"
	"testing"
	"unsafe"
)

func TestInternKeepsOneCopyOfEachDocument(t *testing.T) {
	var tr Transport
	doc := "subscription S($id: ID!) { messageStream(sessionId: $id) { cursor } }"
	first := tr.intern(strings.Clone(doc))
	again := tr.intern(strings.Clone(doc)) // the same text, read from another client
	if again != doc || unsafe.StringData(again) != unsafe.StringData(first) {
		t.Fatal("a document sent twice is kept twice")
	}
	big := strings.Repeat(" ", maxInternedBytes+1)
	if got := tr.intern(big); unsafe.StringData(got) != unsafe.StringData(big) || len(tr.queries) != 1 {
		t.Error("a document over the bound was kept")
	}
	for i := range maxInterned + 10 {
		tr.intern(strings.Repeat("x", i+1))
	}
	if n := len(tr.queries); n > maxInterned {
		t.Errorf("%d documents kept, more than the bound %d", n, maxInterned)
	}
}
