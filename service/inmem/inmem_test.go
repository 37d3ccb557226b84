package inmem_test

import (
	"fmt"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
	"github.com/talkgraph/talkgraph/service/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) service.Store {
		s := inmem.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestClosed(t *testing.T) {
	s := inmem.New()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := service.ErrorCode(s.Ping(t.Context())), service.EUNAVAILABLE; got != want {
		t.Errorf("Ping after Close: code %q, want %q", got, want)
	}
	errs := s.Append(t.Context(), []*service.Batch{{SessionID: "s1", Create: &service.TalkSession{ID: "s1"}}})
	if got, want := service.ErrorCode(errs[0]), service.EUNAVAILABLE; got != want {
		t.Errorf("Append after Close: code %q, want %q", got, want)
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { storetest.BenchmarkAppend(b, inmem.New(), n) })
	}
}

func BenchmarkCompact(b *testing.B) {
	for _, prepared := range []bool{false, true} {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("prepared=%v/sessions=%d", prepared, n), func(b *testing.B) {
				storetest.BenchmarkCompact(b, inmem.New(), n, 200, prepared)
			})
		}
	}
}
