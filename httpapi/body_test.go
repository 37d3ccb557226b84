package httpapi

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSlotsCapEachKeyAndForgetKeysThatHoldNothing(t *testing.T) {
	s := newSlots(2)
	for range 2 {
		if !s.take("a") {
			t.Fatal("a key was refused below its cap")
		}
	}
	if s.take("a") || !s.full("a") {
		t.Fatal("a key took more than its cap")
	}
	if !s.take("b") {
		t.Fatal("another key was refused")
	}
	s.release("a")
	if !s.take("a") {
		t.Fatal("a released slot did not come back")
	}
	s.release("a")
	s.release("a")
	s.release("b")
	if len(s.held) != 0 {
		t.Errorf("keys that hold nothing are kept: %v", s.held)
	}
}

// oneByte reads one byte at a time, as a slow client sends.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func TestReadAllReadsWholeBodiesUpToTheLimit(t *testing.T) {
	body := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name string
		r    io.Reader
		size int64
	}{
		{"declared", strings.NewReader(body), 3000},
		{"chunked", strings.NewReader(body), -1},
		{"a byte at a time", oneByte{strings.NewReader(body)}, -1},
		{"declared larger than sent", strings.NewReader(body), 1 << 20},
	} {
		got, err := readAll(tc.r, tc.size, 4000)
		if err != nil || string(got) != body {
			t.Errorf("%s: %d bytes, %v", tc.name, len(got), err)
		}
	}
	if _, err := readAll(strings.NewReader(body), -1, 2999); !errors.Is(err, errBodyTooLarge) {
		t.Errorf("a chunked body over the limit: %v", err)
	}
	if got, err := readAll(bytes.NewReader(nil), 0, 10); err != nil || len(got) != 0 {
		t.Errorf("an empty body: %q %v", got, err)
	}
}

func TestReadAllAllocatesForWhatArrivesNotForWhatIsDeclared(t *testing.T) {
	got, err := readAll(strings.NewReader("{}"), 1<<30, 1<<31)
	if err != nil || string(got) != "{}" {
		t.Fatal(got, err)
	}
	if cap(got) > firstBuffer+1 {
		t.Errorf("a body declared at 1 GiB that sent 2 bytes took a buffer of %d bytes", cap(got))
	}
}
