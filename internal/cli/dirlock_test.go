package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gochat-ai/gochat/internal/dirlock"
)

// TestOutputDirLock (issue 13, item 1): while `gochat sft` runs in an
// output directory, a second run there — the same flags with --resume,
// or other flags with --overwrite — is refused at once, naming the
// holder's pid, and changes nothing; `gochat train` on a directory in use
// too, before it writes anything. After the first run is SIGKILLed the
// kernel has dropped its lock.
func TestOutputDirLock(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gochat")
	}
	mdir := tinyModel(t)
	bin := buildGochat(t)
	out := filepath.Join(t.TempDir(), "out")
	args := func(extra ...string) []string {
		return append([]string{"--log-format", "json", "--threads", "1", "sft", "--model", mdir, "--data", sample(),
			"--data-split", "1,0,0", "--max-seq-len", "48", "--per-device-train-batch-size", "2", "--num-train-epochs", "400",
			"--seed", "7", "--output-dir", out, "--data-cache", "off", "--save-interval", "5"}, extra...)
	}
	first := exec.Command(bin, args()...)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	// Wait for the first checkpoint: the run is under way.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(out, "checkpoint", "state.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run wrote no checkpoint")
		}
		time.Sleep(50 * time.Millisecond)
	}
	runJSON, _ := os.ReadFile(filepath.Join(out, runFile))
	for _, c := range [][]string{args("--resume"), args("--overwrite", "--seed", "8")} {
		o, err := exec.Command(bin, c...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(o), "is in use by gochat pid") {
			t.Errorf("second run %v: %v\n%s", c[len(c)-2:], err, o)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, runFile)); string(b) != string(runJSON) {
		t.Errorf("a refused run changed %s", runFile)
	}
	// gochat train on a directory another run holds.
	parent := filepath.Join(t.TempDir(), "train")
	release, err := dirlock.Lock(parent)
	if err != nil {
		t.Fatal(err)
	}
	o, err := exec.Command(bin, "--log-format", "json", "train", "--recipe", "demo", "--output-dir", parent).CombinedOutput()
	release()
	if err == nil || !strings.Contains(string(o), "is in use by gochat pid") {
		t.Errorf("train on a held directory: %v\n%s", err, o)
	}
	if names := listDir(parent); len(names) != 1 || names[0] != dirlock.File {
		t.Errorf("the refused train wrote %v", names)
	}

	first.Process.Kill()
	first.Wait()
	release, err = dirlock.Lock(out)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	release()
}
