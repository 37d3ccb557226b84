package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// sharedStore is a store that other processes write too, and that coordinates nothing:
// it hides the SoleWriter of the store inside, as such a store would have none.
type sharedStore struct{ service.Store }

// A store that other processes write as well gets none of the shortcuts a SoleWriter
// allows: a process whose memory of a session went stale reads the session again before it
// writes. Here a rename back to the title the stale process remembers is still written
// (trusting its memory, it would see nothing to change), and its subscriber sees both
// renames, in order.
func TestSharedStoreWithoutSoleWriterStaysCorrect(t *testing.T) {
	store := sharedStore{inmem.New()}
	a, _ := startService(t, setup{store: store})
	b, _ := startService(t, setup{store: store})
	v, err := a.CreateTalkSession(alice, "first", service.SettingsInput{})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, a, alice, v.ID, "") // a holds the session in memory from now on

	if _, err := b.RenameTalkSession(alice, v.ID, "second"); err != nil {
		t.Fatalf("rename on the other process: %v", err)
	}
	got, err := a.RenameTalkSession(alice, v.ID, "first")
	if err != nil {
		t.Fatalf("rename on the process whose memory is stale: %v", err)
	}
	if got.Title != "first" {
		t.Errorf("the rename answered the title %q, want first", got.Title)
	}
	if stored := view(t, b, alice, v.ID); stored.Title != "first" {
		t.Errorf("the store holds the title %q after the rename back, want first: the rename was lost", stored.Title)
	}
	evs := f.until(func(ev *service.Event) bool {
		return ev.Type == service.EventSessionUpdated && ev.Session.Title == "first"
	})
	var titles []string
	for _, ev := range evs {
		if ev.Type == service.EventSessionUpdated {
			titles = append(titles, ev.Session.Title)
		}
	}
	if len(titles) != 2 || titles[0] != "second" {
		t.Errorf("the subscriber saw the renames %q, want [second first]", titles)
	}
}
