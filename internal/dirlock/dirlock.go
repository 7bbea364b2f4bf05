// Package dirlock keeps two gochat runs out of one output directory: a
// run holds an advisory lock (flock(2)) on DIR/.gochat.lock for as long
// as it writes there, and a second run is refused at once with the
// holder's process, host, command and start time. The kernel releases the
// lock when the holder exits, however it exits (SIGKILL included), so a
// dead run never leaves a stale lock; the file itself stays.
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File is the lock file's name inside a locked directory.
const File = ".gochat.lock"

// Holder describes the run holding a lock (the lock file's content).
type Holder struct {
	PID     int      `json:"pid"`
	Host    string   `json:"host"`
	Args    []string `json:"args"`
	Started string   `json:"started"` // RFC 3339, UTC
}

// BusyError is Lock's error when another run holds the directory.
type BusyError struct {
	Dir    string
	Holder Holder // zero when the holder has not written itself yet
}

func (e *BusyError) Error() string {
	who := "another gochat run"
	if h := e.Holder; h.PID > 0 {
		who = fmt.Sprintf("gochat pid %d on %s (started %s: %s)", h.PID, h.Host, h.Started, strings.Join(h.Args, " "))
	}
	return fmt.Sprintf("output directory %s is in use by %s; wait for it to end or choose another directory", e.Dir, who)
}

// ErrBusy matches a *BusyError with errors.Is.
var ErrBusy = errors.New("dirlock: directory in use")

// Is implements errors.Is for ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Lock creates dir if needed and takes its lock without waiting, writing
// this process into the lock file; release releases it. A directory held
// by another process (of any user) returns a *BusyError.
func Lock(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		defer f.Close()
		be := &BusyError{Dir: dir}
		if b, err := os.ReadFile(path); err == nil {
			_ = json.Unmarshal(b, &be.Holder)
		}
		return nil, be
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(Holder{PID: os.Getpid(), Host: host, Args: os.Args, Started: time.Now().UTC().Format(time.RFC3339)})
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0)
	}
	return func() { unlock(f); f.Close() }, nil
}
