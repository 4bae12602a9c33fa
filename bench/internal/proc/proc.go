// Package proc starts and stops the contenders, each its own process, and
// reads their peak resident memory from /proc.
package proc

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a started process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
	log  *os.File
}

// Start starts argv with env added to the harness's environment, its
// output going to logPath. The process is killed if the harness dies.
func Start(name string, argv, env []string, dir, logPath string) (*Proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, and SIGKILL when the harness goes away, so
	// that no contender outlives a failed run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// WaitHTTP waits until url answers 2xx, the process exits, or timeout.
func (p *Proc) WaitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for {
		if ended, err := p.Exited(); ended {
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.Name, err, p.log.Name())
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s (last error %v); see %s", p.Name, url, timeout, err, p.log.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	defer p.log.Close()
	if ended, _ := p.Exited(); ended {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// ResetPeakRSS resets the kernel's peak RSS mark (VmHWM) of the process to
// its current RSS, so that the next PeakRSS covers only what follows.
func (p *Proc) ResetPeakRSS() error {
	// "5" resets the peak RSS (Linux 4.0 and later).
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.PID()), []byte("5"), 0)
}

// PeakRSS returns the process's peak resident set size (VmHWM) in KiB.
func (p *Proc) PeakRSS() (int64, error) {
	return statusField(p.PID(), "VmHWM:")
}

func statusField(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB"))
			return strconv.ParseInt(kb, 10, 64)
		}
	}
	return 0, errors.New("no " + field + " in /proc status")
}

// Group stops every process it holds, last started first. The harness
// defers StopAll so that a failure leaves nothing running.
type Group struct{ procs []*Proc }

// Add remembers p.
func (g *Group) Add(p *Proc) { g.procs = append(g.procs, p) }

// StopAll stops every process.
func (g *Group) StopAll() {
	for i := len(g.procs) - 1; i >= 0; i-- {
		g.procs[i].Stop(5 * time.Second)
	}
	g.procs = nil
}

// CPUTime returns the CPU time (user and system) the process has used.
func (p *Proc) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID()))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces: count from its ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// utime and stime are fields 14 and 15, in clock ticks (100 per
	// second on Linux).
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}

// Kill sends SIGKILL to the process group and waits for the process to
// end: a crash, as opposed to Stop.
func (p *Proc) Kill() {
	defer p.log.Close()
	if ended, _ := p.Exited(); ended {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}
