package inmem

import (
	"context"

	"github.com/talkgraph/talkgraph/service"
)

// Compact implements service.Store.
func (s *Store) Compact(ctx context.Context, cs []service.Compaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// One stream at a time under the lock, so that a thousand replies folded at once do
	// not hold every other call up meanwhile.
	for _, c := range cs {
		if err := s.compactOne(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) compactOne(c service.Compaction) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed()
	}
	if sd := s.sessions[c.SessionID]; sd != nil {
		compact(sd, c)
	}
	return nil
}

// compact folds one stream of sd in one pass over its events from c.FromSeq, with the
// folding the service prepared when each of its runs is whole here, else with what
// Coalesce makes of the events; s.mu must be held.
func compact(sd *sessionData, c service.Compaction) {
	i, _ := findEvent(sd.events, c.FromSeq)
	folded := c.Folded
	if !c.PreparedInRange() || !runsWhole(sd.events, c) {
		folded, _ = service.Coalesce(sd.events[i:], c.Key)
	}
	if len(folded) == 0 {
		return
	}
	// Each folded event replaces the events of its run, from its CoalescedFrom (or
	// FromSeq, when the run was folded before) to itself; both are in Seq order.
	out := sd.events[:i]
	f := 0
	for _, e := range sd.events[i:] {
		for f < len(folded) && e.Seq > folded[f].Seq {
			f++
		}
		if f < len(folded) {
			switch fe := folded[f]; {
			case e.Seq == fe.Seq:
				e = cloneEvent(fe)
			case e.Seq >= max(fe.CoalescedFrom, c.FromSeq):
				continue
			}
		}
		out = append(out, e)
	}
	clear(sd.events[len(out):])
	sd.events = out
}

// runsWhole reports whether events hold every Seq of each run of c's prepared folding.
func runsWhole(events []*service.Event, c service.Compaction) bool {
	for _, e := range c.Folded {
		first := e.CoalescedFrom
		i, ok1 := findEvent(events, first)
		j, ok2 := findEvent(events, e.Seq)
		if !ok1 || !ok2 || int64(j-i) != e.Seq-first {
			return false
		}
	}
	return true
}
