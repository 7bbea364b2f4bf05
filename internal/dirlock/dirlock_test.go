package dirlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLock: a held directory is refused naming the holder; after unlock
// it can be taken again. flock locks belong to open file descriptions, so
// a second Lock in the same process conflicts just as another process's
// would.
func TestLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := filepath.Join(t.TempDir(), "out")
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	var be *BusyError
	if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
		t.Fatalf("second Lock: %v, want a BusyError", err)
	}
	if be.Holder.PID != os.Getpid() || !strings.Contains(err.Error(), "in use by gochat pid") {
		t.Errorf("holder %+v, message %q", be.Holder, err)
	}
	unlock()
	unlock2, err := Lock(dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	unlock2()
}

// TestLockReleasedByKill: the lock of a process that is SIGKILLed goes
// with it (the kernel drops the flock), so the directory can be locked
// again and no stale lock remains.
func TestLockReleasedByKill(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	if os.Getenv("DIRLOCK_HOLD") != "" {
		if _, err := Lock(os.Getenv("DIRLOCK_HOLD")); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		select {} // hold until killed
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLockReleasedByKill$")
	cmd.Env = append(os.Environ(), "DIRLOCK_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	if _, err := Lock(dir); !errors.Is(err, ErrBusy) {
		t.Fatalf("while the child holds it: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	unlock()
}
