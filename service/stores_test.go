package service_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// soleWriter is the SoleWriter answer of inner, which a test's store wrapper observes: a
// wrapper is the same store, seen from the test, and keeps its abilities.
func soleWriter(inner service.Store) bool {
	w, ok := inner.(service.SoleWriter)
	return ok && w.SoleWriter()
}

func (s *flakyStore) SoleWriter() bool { return soleWriter(s.Store) }

func (s *countingStore) SoleWriter() bool { return soleWriter(s.Store) }

func (s *compactionLog) SoleWriter() bool { return soleWriter(s.Store) }

func (s *gatedStore) SoleWriter() bool { return soleWriter(s.Store) }

// flakyStore is a Store whose writes fail with EUNAVAILABLE while writesFail is set, and
// whose event reads fail while readsFail is set, the way a full disk or a lost connection
// fails them. Every Append it refuses is sent on refused (when there is room).
type flakyStore struct {
	service.Store
	writesFail atomic.Bool
	readsFail  atomic.Bool
	refused    chan []*service.Batch
}

func newFlakyStore() *flakyStore {
	return &flakyStore{Store: inmem.New(), refused: make(chan []*service.Batch, 1000)}
}

var errBroken = service.Errorf(service.EUNAVAILABLE, "the disk is full (test)")

func (f *flakyStore) Append(ctx context.Context, batches []*service.Batch) []error {
	if f.writesFail.Load() {
		errs := make([]error, len(batches))
		for i := range errs {
			errs[i] = errBroken
		}
		select {
		case f.refused <- batches:
		default:
		}
		return errs
	}
	return f.Store.Append(ctx, batches)
}

func (f *flakyStore) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*service.Event, error) {
	if f.readsFail.Load() {
		return nil, errBroken
	}
	return f.Store.Events(ctx, sessionID, afterSeq, limit)
}

// refusedChunks waits until the store has refused a write of streamed text, and returns
// the text it carried.
func (f *flakyStore) refusedChunks(t *testing.T) string {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case bs := <-f.refused:
			var text strings.Builder
			for _, b := range bs {
				for _, ev := range b.Events {
					if ev.Type == service.EventMessageChunk {
						text.WriteString(ev.Delta)
					}
				}
			}
			if text.Len() > 0 {
				return text.String()
			}
		case <-timeout:
			t.Fatal("no write of streamed text was tried")
		}
	}
}

// countingStore counts the reads made of a Store, by method.
type countingStore struct {
	service.Store
	mu    sync.Mutex
	reads map[string]int
	// afterSession, when set, is called as each Session read returns.
	afterSession func()
}

func (c *countingStore) count(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads == nil {
		c.reads = map[string]int{}
	}
	c.reads[method]++
}

// take returns the counts so far and starts again.
func (c *countingStore) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads
	c.reads = nil
	return r
}

func (c *countingStore) Session(ctx context.Context, id string) (*service.TalkSession, error) {
	c.count("Session")
	if c.afterSession != nil {
		defer c.afterSession()
	}
	return c.Store.Session(ctx, id)
}

func (c *countingStore) Sessions(ctx context.Context, userID string, after *service.SessionPosition, limit int) ([]*service.TalkSession, error) {
	c.count("Sessions")
	return c.Store.Sessions(ctx, userID, after, limit)
}

func (c *countingStore) Messages(ctx context.Context, sessionID string, page service.MessagePage) ([]*service.Message, error) {
	c.count("Messages")
	return c.Store.Messages(ctx, sessionID, page)
}

func (c *countingStore) Message(ctx context.Context, id string) (*service.Message, error) {
	c.count("Message")
	return c.Store.Message(ctx, id)
}

func (c *countingStore) Run(ctx context.Context, id string) (*service.Run, error) {
	c.count("Run")
	return c.Store.Run(ctx, id)
}

func (c *countingStore) Question(ctx context.Context, id string) (*service.Question, error) {
	c.count("Question")
	return c.Store.Question(ctx, id)
}

func (c *countingStore) Questions(ctx context.Context, ids []string) ([]*service.Question, error) {
	c.count("Questions")
	return c.Store.Questions(ctx, ids)
}

func (c *countingStore) ToolCalls(ctx context.Context, messageIDs []string) ([]*service.ToolCall, error) {
	c.count("ToolCalls")
	return c.Store.ToolCalls(ctx, messageIDs)
}

func (c *countingStore) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*service.Event, error) {
	c.count("Events")
	return c.Store.Events(ctx, sessionID, afterSeq, limit)
}

func (c *countingStore) Idempotency(ctx context.Context, userID, key string) (*service.IdempotencyRecord, error) {
	c.count("Idempotency")
	return c.Store.Idempotency(ctx, userID, key)
}
