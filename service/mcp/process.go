package mcp

import (
	"bufio"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// process is a stdio server's process: talkgraph writes to its stdin and reads its
// stdout (the MCP messages) and its stderr (logged).
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // the writing end of the process's stdin
	stdout *os.File // the reading end of its stdout
	stderr *tail
	exited chan struct{} // closed once the process has exited and was reaped
	err    error         // how it exited, once exited is closed

	stopOnce sync.Once
}

// stopGrace is how long a process has to exit after its stdin closes, and then after
// SIGTERM, before it is killed: a whole stop takes at most about twice as long.
const stopGrace = time.Second

// startProcess starts cfg's command in a process group of its own (see procAttr), with a
// small environment: the variables of talkgraph's that Inherited names, and cfg.Env.
// Lines it writes to stderr are logged at debug level, and the last ones are kept for the
// message of its failure.
func startProcess(cfg ServerConfig, log *slog.Logger) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Env = environ(cfg.Env)
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	procAttr(cmd)
	err = spawn(cmd)
	// The child holds its own copies.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	p := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: newTail(errR, log), exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the process the way MCP asks a client to: its stdin is closed, then (after
// stopGrace) its group gets SIGTERM, then SIGKILL. Whatever it started in its group is
// killed too, and the pipes are let go even if a process that left the group holds them.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
			signalGroup(p.cmd, false)
			select {
			case <-p.exited:
			case <-time.After(stopGrace):
				signalGroup(p.cmd, true)
				<-p.exited
			}
		}
		signalGroup(p.cmd, true) // what the command left behind in its group
		p.stdout.Close()
		p.stderr.release()
	})
}

// environ is a server's environment: talkgraph's variables that Inherited names (never
// its secrets), then extra.
func environ(extra map[string]string) []string {
	var out []string
	for _, k := range Inherited {
		if v, ok := os.LookupEnv(k); ok {
			if _, mine := extra[k]; !mine {
				out = append(out, k+"="+v)
			}
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

// tail reads a process's stderr: each line is logged at debug level, and the last few
// are kept to explain its failure.
type tail struct {
	r    *os.File
	done chan struct{}

	mu    sync.Mutex
	lines []string
}

const (
	tailLines   = 5
	maxLogLine  = 500
	maxReadLine = 64 << 10
)

func newTail(r *os.File, log *slog.Logger) *tail {
	t := &tail{r: r, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		br := bufio.NewReaderSize(r, 4096)
		for {
			line, err := readLine(br)
			if line != "" {
				log.Debug("mcp server stderr", "line", line)
				t.mu.Lock()
				t.lines = append(t.lines, line)
				if len(t.lines) > tailLines {
					t.lines = t.lines[1:]
				}
				t.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return t
}

// readLine reads one line, cut to maxLogLine bytes; a longer one is read to its end.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(b) < maxLogLine {
			b = append(b, chunk[:min(len(chunk), maxLogLine-len(b))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return strings.ToValidUTF8(strings.TrimRight(string(b), "\r\n"), "\uFFFD"), err
	}
}

// last returns the last lines the process wrote to stderr, joined.
func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}

// release waits a moment for stderr to end (it has once every process holding it is
// gone), then lets it go.
func (t *tail) release() {
	_ = t.r.SetReadDeadline(time.Now().Add(stopGrace))
	<-t.done
	t.r.Close()
}
