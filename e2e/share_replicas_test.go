package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// A live link followed on one replica while its session runs on another: the reader gets
// the reply the other replica streams, whole; revoking the link there ends the stream here
// at once (its revocation is an event of the session's log, which the replica following
// the session gets over NATS), and the link reads null on every replica.
func TestSharedStreamAcrossReplicas(t *testing.T) {
	rs := newReplicaSet(t, setOptions{n: 2})
	r := rs.reps
	owner := tgtest.Guest(t, r[0].URL)
	sid := owner.CreateSession(nil)
	lid, token, _ := link(t, owner, sid, ", live: true")
	reader := &tgtest.Client{T: t, Base: r[1].URL, HTTP: &http.Client{Timeout: tgtest.Wait}}
	got := readShared(t, reader, token)
	if got == nil || got.StreamCursor == nil {
		t.Fatalf("the link on the other replica: %+v", got)
	}
	evs := tgtest.NewEvents(t, mustSub(reader.Connect("graphql-transport-ws"), sharedStreamQuery,
		map[string]any{"t": token, "a": *got.StreamCursor}))
	_, run := owner.Send(sid, "/slow 5")
	if o := rs.owner(t, run); o != r[0].id {
		t.Fatalf("the run is on %s, want %s", o, r[0].id)
	}
	evs.Until("the reply streamed on the other replica", tgtest.RunEnds(run))
	reply := lastAssistant(owner.Messages(sid))
	if text := tgtest.Text(evs.All)[reply.ID]; text != reply.Content || !strings.Contains(text, "chunk 5") {
		t.Errorf("the reader on replica 1 got %q, the reply is %q", text, reply.Content)
	}

	start := time.Now()
	owner.Must(`mutation($l: ID!){ revokeShareLink(id: $l){ id } }`, map[string]any{"l": lid}, nil)
	if _, ok := evs.TryNext(tgtest.Wait); ok || len(evs.Err) == 0 || evs.Err[0].Code() != "NOT_FOUND" {
		t.Fatalf("the stream on replica 1 after the revocation on replica 0: errors %+v", evs.Err)
	}
	t.Logf("the stream on the other replica ended %v after the revocation was asked", time.Since(start))
	for _, rep := range r {
		if got := readShared(t, reader.On(rep.URL), token); got != nil {
			t.Errorf("the revoked link reads %+v on %s", got, rep.id)
		}
	}
}
