package postgres_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service/postgres"
)

// TestFirstSeen: an ID is first once, across the Stores sharing a database (replicas, or
// one replica before and after a restart), and of several recording it at once, one
// alone is first.
func TestFirstSeen(t *testing.T) {
	ctx := t.Context()
	url := newSchema(t, newDatabase(t))
	a := mustOpen(t, url, postgres.Options{})
	until := time.Now().Add(2 * time.Minute)

	first := func(s *postgres.Store, id string) bool {
		t.Helper()
		ok, err := s.FirstSeen(ctx, []byte(id), until)
		must(t, err)
		return ok
	}
	if !first(a, "id-1") {
		t.Fatal("a new ID was not first")
	}
	if first(a, "id-1") {
		t.Error("an ID was first twice in one Store")
	}
	must(t, a.Close())
	b := mustOpen(t, url, postgres.Options{}) // the replica, restarted
	if first(b, "id-1") {
		t.Error("an ID was first again in a Store opened after the one that recorded it")
	}
	if !first(b, "id-2") {
		t.Error("another ID was not first")
	}

	c := mustOpen(t, url, postgres.Options{}) // another replica
	var firsts atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			s := b
			if i%2 == 1 {
				s = c
			}
			ok, err := s.FirstSeen(ctx, []byte("id-3"), until)
			if err != nil {
				t.Error(err)
			}
			if ok {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if n := firsts.Load(); n != 1 {
		t.Errorf("recorded at once 16 times by two Stores, an ID was first %d times, want once", n)
	}
}

// TestFirstSeenForgets: the IDs whose time has passed are deleted (by the next Store to
// record an ID, since none did it yet), and the others kept.
func TestFirstSeenForgets(t *testing.T) {
	ctx := t.Context()
	url := newSchema(t, newDatabase(t))
	a := mustOpen(t, url, postgres.Options{})
	must(t, firstSeen(a, "recent", time.Now().Add(time.Minute)))
	must(t, firstSeen(a, "gone", time.Now().Add(-time.Second)))

	b := mustOpen(t, url, postgres.Options{})
	must(t, firstSeen(b, "new", time.Now().Add(time.Minute)))
	conn, err := pgx.Connect(ctx, url)
	must(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT convert_from(id, 'UTF8') FROM bus_seen ORDER BY id`)
	must(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	if len(ids) != 2 || ids[0] != "new" || ids[1] != "recent" {
		t.Errorf("bus_seen holds %q, want [new recent]", ids)
	}
}

func firstSeen(s *postgres.Store, id string, until time.Time) error {
	_, err := s.FirstSeen(context.Background(), []byte(id), until)
	return err
}

// BenchmarkFirstSeen is what a command crossing between replicas pays for being
// remembered: one insert of a new ID, a round trip and a commit.
func BenchmarkFirstSeen(b *testing.B) {
	s := mustOpen(b, newSchema(b, newDatabase(b)), postgres.Options{})
	until := time.Now().Add(2 * time.Minute)
	id := make([]byte, 16)
	var n uint64
	for b.Loop() {
		n++
		binary.BigEndian.PutUint64(id, n)
		if _, err := s.FirstSeen(b.Context(), id, until); err != nil {
			b.Fatal(err)
		}
	}
}
