//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// crashEnv tells a re-executed test binary which database to write before killing itself.
const crashEnv = "TALKGRAPH_POSTGRES_CRASH_URL"

const crashBatches = 50

// TestAppendSurvivesKill runs a child process that appends batches and then kills itself
// with SIGKILL, without closing the Store; every batch it appended must be there after.
func TestAppendSurvivesKill(t *testing.T) {
	if url := os.Getenv(crashEnv); url != "" {
		crashChild(url)
		return
	}
	url := newSchema(t, newDatabase(t))
	cmd := exec.Command(os.Args[0], "-test.run=^TestAppendSurvivesKill$")
	cmd.Env = append(os.Environ(), crashEnv+"="+url)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want it killed\n%s", err, out)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL\n%s", err, out)
	}

	s := mustOpen(t, url, postgres.Options{})
	if got, want := lastSeq(t, s, "s1"), int64(crashBatches); got != want {
		t.Errorf("LastSeq after kill -9 = %d, want %d", got, want)
	}
	events, err := s.Events(t.Context(), "s1", 0, 0)
	must(t, err)
	if got, want := len(events), crashBatches; got != want {
		t.Errorf("%d events after kill -9, want %d", got, want)
	}
	m, err := s.Message(t.Context(), "m1")
	must(t, err)
	if got, want := m.Content, fmt.Sprint(crashBatches-1); got != want {
		t.Errorf("message content after kill -9 = %q, want %q", got, want)
	}
}

func crashChild(url string) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := create(s, "s1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := range crashBatches {
		// Each batch completes message m1 again with new content: the row follows the log.
		m := &service.Message{ID: "m1", SessionID: "s1", Seq: 1, Content: fmt.Sprint(i), CreatedAt: t0}
		typ := service.EventMessageCompleted
		if i == 0 {
			typ = service.EventMessageAdded
		}
		b := &service.Batch{SessionID: "s1", Events: []*service.Event{{Seq: int64(i + 1), Type: typ, At: t0, Message: m}}}
		if err := appendOne(s, b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // wait for the signal
}
