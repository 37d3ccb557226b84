package inmem_test

import (
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
	err := s.Apply(t.Context(), &service.Batch{SessionID: "s1", Session: &service.TalkSession{ID: "s1"}})
	if got, want := service.ErrorCode(err), service.EUNAVAILABLE; got != want {
		t.Errorf("Apply after Close: code %q, want %q", got, want)
	}
}

func BenchmarkApplyChunk(b *testing.B) {
	storetest.BenchmarkApplyChunk(b, inmem.New())
}
