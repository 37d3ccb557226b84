package service

import (
	"context"
	"time"
)

// compactSoonLocked asks the compactor to fold a finished stream's chunk events (see
// Store.Compact). Compaction only keeps the log small, so a request is dropped, with a
// note in the log, when too many wait. st.mu must be held: when the session's tail still
// holds the stream whole, the folding is made from the tail here, so that the store need
// not read the events back. (The tail holds only events made durable, in the log's order,
// whichever replica wrote them; the store checks that the runs are still whole.)
func (st *sessionState) compactSoonLocked(key string, fromSeq int64) {
	s := st.c
	if fromSeq <= 0 {
		return
	}
	c := Compaction{SessionID: st.id, Key: key, FromSeq: fromSeq}
	if evs, ok := st.log.since(fromSeq); st.log.synced && ok {
		c.Folded, _ = Coalesce(evs, key)
		c.Prepared = true
	}
	select {
	case s.compactions <- c:
	default:
		s.log.Debug("compaction skipped: too many waiting", "session", st.id)
	}
}

// maxCompactBatch is how many finished streams the compactor folds at most in one go.
const maxCompactBatch = 1024

// compactor folds finished streams off the paths that answer clients. Compaction only
// keeps the log small, so it can wait: the compactor gathers the streams that finish
// over Config.CompactAfter and folds them in one go, so that replies ending together (a
// burst) cost the store one transaction after the busiest moment rather than one each
// during it. At shutdown it folds what waits.
func (s *Service) compactor() {
	defer close(s.compactorDone)
	do := func(batch []Compaction) {
		if len(batch) == 0 {
			return
		}
		if err := s.store.Compact(context.Background(), batch); err != nil {
			s.log.Warn("compaction", "streams", len(batch), "err", err)
		}
	}
	take := func(batch []Compaction) []Compaction {
		for len(batch) < maxCompactBatch {
			select {
			case c := <-s.compactions:
				batch = append(batch, c)
			default:
				return batch
			}
		}
		return batch
	}
	gather := time.NewTimer(s.cfg.CompactAfter)
	gather.Stop()
	for {
		var batch []Compaction
		select {
		case c := <-s.compactions:
			batch = append(batch, c)
		case <-s.compactorQuit:
			for batch = take(nil); len(batch) > 0; batch = take(nil) {
				do(batch)
			}
			return
		}
		gather.Reset(s.cfg.CompactAfter)
		select {
		case <-gather.C:
		case <-s.compactorQuit:
			gather.Stop()
		}
		do(take(batch))
	}
}
