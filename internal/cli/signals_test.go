package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gochat-ai/gochat/train"
)

// startMain runs gochat's Main with args in a child process (the test
// binary with GOCHAT_TEST_MAIN=1), its stderr in errb.
func startMain(t *testing.T, errb *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "GOCHAT_TEST_MAIN=1")
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// waitMetrics waits until dir's metrics log has n lines.
func waitMetrics(t *testing.T, cmd *exec.Cmd, errb *bytes.Buffer, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		f, err := os.Open(filepath.Join(dir, train.MetricsFile))
		if err == nil {
			lines := 0
			for sc := bufio.NewScanner(f); sc.Scan(); {
				lines++
			}
			f.Close()
			if lines >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no %d metrics lines in time: %s", n, errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSIGINTCheckpointsAndResumes (issue 13, item 5): Ctrl-C (SIGINT)
// mid-run stops `gochat sft` after the step in progress with a checkpoint
// (not a scheduled one: --save-interval is past the run's end), exit code
// 130 and a message saying how to resume; --resume then ends with the
// uninterrupted run's weights byte for byte and its losses.
func TestSIGINTCheckpointsAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs sft several times")
	}
	mdir := tinyModel(t)
	tmp := t.TempDir()
	args := func(dir string) []string {
		return []string{"--log-format", "json", "--threads", "2", "sft", "--model", mdir, "--data", sample(), "--data-split", "1,0,0",
			"--max-seq-len", "40", "--per-device-train-batch-size", "4", "--gradient-accumulation-steps", "2",
			"--num-train-epochs", "25", "--save-interval", "1000", "--learning-rate", "1e-3", "--output-dir", dir, "--data-cache", "off"}
	}
	ref := filepath.Join(tmp, "ref")
	if _, e, code := run(t, args(ref)...); code != 0 {
		t.Fatal(lastLine(e))
	}
	dir := filepath.Join(tmp, "stopped")
	var errb bytes.Buffer
	cmd := startMain(t, &errb, args(dir)...)
	waitMetrics(t, cmd, &errb, dir, 3)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		t.Skip("the run finished before the signal")
	}
	var ee *exec.ExitError
	msg := errb.String()
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("after SIGINT: %v, want exit code %d\n%s", err, exitInterrupted, msg)
	}
	for _, want := range []string{"stopping after the current step", "checkpoint saved in " + filepath.Join(dir, train.CheckpointDir), "with --resume to continue"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q:\n%s", want, msg)
		}
	}
	if !train.HasCheckpoint(dir) {
		t.Fatal("no checkpoint after SIGINT")
	}
	if _, e, code := run(t, append(args(dir), "--resume")...); code != 0 {
		t.Fatalf("resume: %s", lastLine(e))
	}
	sameRun(t, ref, dir)

}

// signalsChild is the child process of TestSecondSignalExits: it watches
// the signals as Main does, reports the first stop request on stdout and
// then stays busy, as a run saving a long checkpoint would.
func signalsChild() {
	g := &Globals{Out: os.Stdout, Err: os.Stderr}
	defer g.watchSignals()()
	os.Stdout.WriteString("ready\n")
	<-g.Stop
	os.Stdout.WriteString("stopping\n")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestSecondSignalExits (issue 13, item 5): while a run is stopping after
// a first SIGINT, a second one (SIGTERM too) exits at once with code 130.
func TestSecondSignalExits(t *testing.T) {
	for _, second := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCHAT_TEST_SIGNALS=1")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		next := func(want string) {
			if !lines.Scan() || lines.Text() != want {
				cmd.Process.Kill()
				t.Fatalf("child said %q, want %q; stderr:\n%s", lines.Text(), want, errb.String())
			}
		}
		next("ready")
		cmd.Process.Signal(syscall.SIGINT)
		next("stopping")
		start := time.Now()
		cmd.Process.Signal(second)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || time.Since(start) > 10*time.Second {
			t.Errorf("second signal %v: %v after %v, want exit code %d at once", second, err, time.Since(start), exitInterrupted)
		}
		if !strings.Contains(errb.String(), "again: exiting now") {
			t.Errorf("second signal %v: stderr %q", second, errb.String())
		}
	}
}
