package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
)

// profiler records the server's CPU profile while a scenario's busy part runs, as
// one-second profiles from the server's pprof listener (-pprof) saved one per file:
// the busy part's length is not known when it starts, and go tool pprof merges the
// files it is given ("go tool pprof -top DIR/burst-*.pprof").
type profiler struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	files  int
	err    error
}

// startProfiler starts recording for scen; nil when -pprof is not set.
func (r *runner) startProfiler(ctx context.Context, scen string) *profiler {
	if r.cfg.Pprof == "" {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &profiler{cancel: cancel}
	if err := os.MkdirAll(r.cfg.PprofDir, 0o755); err != nil {
		p.err = err
		return p
	}
	hc := &http.Client{Timeout: r.cfg.Timeout}
	url := r.cfg.Pprof + "/debug/pprof/profile?seconds=1"
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			name := filepath.Join(r.cfg.PprofDir, fmt.Sprintf("%s-%03d.pprof", scen, i))
			if err := saveProfile(hc, url, name); err != nil {
				p.err = err
				return
			}
			p.files++
		}
	}()
	return p
}

// stop lets the profile in progress finish and reports what was saved.
func (p *profiler) stop(r *runner, scen string) {
	if p == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
	if p.err != nil {
		r.errs.add(scen, "server profile", p.err.Error())
		return
	}
	r.log("%s: the server's CPU profile is in %d files: go tool pprof -top %s", scen, p.files,
		filepath.Join(r.cfg.PprofDir, scen+"-*.pprof"))
}

// saveProfile fetches one profile into a new file at name. It does not take the
// scenario's context: a profile asked for is read to its end.
func saveProfile(hc *http.Client, url, name string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, msg)
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
