package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// ReleaseMemory gives back what SQLite's page caches hold beyond the pages in use, on
// every connection (PRAGMA shrink_memory), and forgets the sessions' log ends it knows.
// The caches grow to their bound (cache_size) as a crowd of sessions is written and read,
// and keep that size after the crowd has gone; call it when the server is quiet, since
// the pages read next come from the operating system's cache again.
//
// It takes the read pool's connections all at once (the pool hands out the one returned
// last, so taking them in turn would shrink one of them again and again); reads wait
// meanwhile, so give ctx a short deadline: connections busy until then keep their caches.
func (s *Store) ReleaseMemory(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	shrink := func(db *sql.DB, n int) error {
		var errs []error
		conns := make([]*sql.Conn, 0, n)
		for range n {
			c, err := db.Conn(ctx)
			if err != nil {
				errs = append(errs, err)
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			_, err := c.ExecContext(context.WithoutCancel(ctx), "PRAGMA shrink_memory")
			errs = append(errs, err, c.Close())
		}
		return errors.Join(errs...)
	}
	s.wmu.Lock()
	err := shrink(s.w, 1)
	s.last = map[string]int64{} // read again as needed (see appendTx)
	s.wmu.Unlock()
	return errors.Join(err, shrink(s.r, s.readConns), shrink(s.ckpt, 1))
}
