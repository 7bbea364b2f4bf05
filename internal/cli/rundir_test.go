package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/internal/dirlock"
)

// snapshot maps every file under dir (relative path) to its SHA-256, the
// lock file (which names its last holder) aside.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == dirlock.File {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := sha256.Sum256(b)
		files[rel] = hex.EncodeToString(h[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestOverwriteValidatesFirst (issue 13, item 2): `--overwrite` with bad
// data, a truncated model or flags the model cannot take fails at load
// and leaves the previous run whole, file for file; one that starts
// replaces the previous run completely (its outputs equal a fresh run's,
// nothing of the old run is left); and a replacement a kill cut short
// is finished by the next start, which then runs afresh.
func TestOverwriteValidatesFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("runs sft several times")
	}
	mdir := tinyModel(t)
	tmp := t.TempDir()
	args := func(dir string, extra ...string) []string {
		return append([]string{"--log-format", "json", "--threads", "2", "sft", "--model", mdir, "--data", sample(),
			"--data-split", "1,0,0", "--max-seq-len", "40", "--per-device-train-batch-size", "4", "--max-steps", "3",
			"--save-interval", "1", "--data-cache", "off", "--output-dir", dir}, extra...)
	}
	dir := filepath.Join(tmp, "run")
	if _, e, code := run(t, args(dir)...); code != 0 {
		t.Fatal(lastLine(e))
	}
	before := snapshot(t, dir)

	truncated := filepath.Join(tmp, "truncated")
	os.MkdirAll(truncated, 0o755)
	for _, e := range listDir(mdir) {
		b, _ := os.ReadFile(filepath.Join(mdir, e))
		if e == "model.safetensors" {
			b = b[:len(b)/2]
		}
		os.WriteFile(filepath.Join(truncated, e), b, 0o644)
	}
	noColumn := filepath.Join(tmp, "bad.jsonl")
	os.WriteFile(noColumn, []byte(`{"question": "a", "answer": "b"}`+"\n"), 0o644)
	for _, c := range []struct {
		name, want string
		args       []string
	}{
		{"missing data", "no such file", args(dir, "--overwrite", "--data", filepath.Join(tmp, "absent.jsonl"))},
		{"bad data", "bad.jsonl", args(dir, "--overwrite", "--data", noColumn)},
		{"truncated model", "model.safetensors", append(args(dir, "--overwrite"), "--model", truncated)},
		{"too long", "max_position_embeddings", args(dir, "--overwrite", "--max-seq-len", "4096")},
	} {
		_, e, code := run(t, c.args...)
		if code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%s: code %d, %q; want an error naming %q", c.name, code, lastLine(e), c.want)
		}
		if got := snapshot(t, dir); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: a failed --overwrite changed the previous run: %d files before, %d after", c.name, len(before), len(got))
		}
	}

	// A run that starts replaces the previous run whole: the directory
	// then holds exactly what a fresh run with these flags writes.
	fresh := filepath.Join(tmp, "fresh")
	if _, e, code := run(t, args(fresh, "--seed", "5")...); code != 0 {
		t.Fatal(lastLine(e))
	}
	if _, e, code := run(t, args(dir, "--overwrite", "--seed", "5")...); code != 0 {
		t.Fatal(lastLine(e))
	}
	sameRun(t, fresh, dir)

	// A kill while the previous run is being moved aside (simulated: the
	// third move fails) leaves a directory the next start finishes
	// clearing; that start then runs afresh.
	moves := 0
	moveEntry = func(a, b string) error {
		if moves++; moves == 3 {
			return errors.New("killed")
		}
		return os.Rename(a, b)
	}
	_, e, code := run(t, args(dir, "--overwrite")...)
	moveEntry = os.Rename
	if code == 0 || !strings.Contains(e, "killed") {
		t.Fatalf("the injected failure did not stop the run: %q", lastLine(e))
	}
	if _, err := os.Stat(filepath.Join(dir, runFile)); err == nil {
		t.Fatal("run.json was not moved aside first")
	}
	if _, e, code := run(t, args(dir, "--seed", "5")...); code != 0 {
		t.Fatal(lastLine(e))
	}
	sameRun(t, fresh, dir)
}

// sameRun checks that dir holds the files of the run in ref, with
// identical models and losses, and no leftovers.
func sameRun(t *testing.T, ref, dir string) {
	t.Helper()
	want, got := snapshot(t, ref), snapshot(t, dir)
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %s is left over (a fresh run has no such file)", dir, name)
		}
	}
	for name, h := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: %s is missing", dir, name)
		case strings.HasSuffix(name, ".safetensors") || name == "config.json":
			if g != h {
				t.Errorf("%s: %s differs from a fresh run's", dir, name)
			}
		}
	}
	a, b := metrics(t, ref), metrics(t, dir)
	if len(a) != len(b) {
		t.Fatalf("%s: %d metrics records, a fresh run %d", dir, len(b), len(a))
	}
	for i := range a {
		if a[i]["loss"] != b[i]["loss"] {
			t.Errorf("%s: metrics record %d has loss %v, a fresh run %v", dir, i, b[i]["loss"], a[i]["loss"])
		}
	}
}

// assertRunOutputs checks that runOutputs names every entry a command
// wrote into its output directory dir, so --overwrite replaces it.
func assertRunOutputs(t *testing.T, dir string) {
	t.Helper()
	names, err := runOutputNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{dirlock.File: true}
	for _, n := range names {
		known[n] = true
	}
	for _, n := range listDir(dir) {
		if !known[n] {
			t.Errorf("%s: runOutputs does not name %s, which the run wrote: --overwrite would leave it", dir, n)
		}
	}
}
