package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/tensor"
	"github.com/gochat-ai/gochat/zero"
)

// copyDir copies the files of the folder src (no subfolders) into dst,
// which it creates.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// flipByte inverts the bits of byte at of the file path (from the end
// when at < 0).
func flipByte(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += len(b)
	}
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// dirFiles lists the names in dir, sorted.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// checkManifest checks that the checkpoint folder cdir holds exactly want
// and SHA256SUMS, and that `sha256sum -c SHA256SUMS` accepts it where GNU
// sha256sum is installed.
func checkManifest(t *testing.T, cdir string, want ...string) {
	t.Helper()
	all := append([]string{manifestFile}, want...)
	slices.Sort(all)
	if got := dirFiles(t, cdir); !slices.Equal(got, all) {
		t.Errorf("checkpoint holds %q, want %q", got, all)
	}
	b, err := os.ReadFile(filepath.Join(cdir, manifestFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !strings.Contains(string(b), "  "+name+"\n") {
			t.Errorf("%s does not list %s:\n%s", manifestFile, name, b)
		}
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Logf("sha256sum not installed: the manifest is not checked by it")
		return
	}
	cmd := exec.Command("sha256sum", "--strict", "-c", manifestFile)
	cmd.Dir = cdir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c %s: %v\n%s", manifestFile, err, out)
	}
}

// TestCheckpointManifest: SaveState's checkpoint holds a manifest that
// GNU sha256sum accepts, and LoadState checks it. The digests are taken
// as the files are written (asyncHash): they match a hash of the files.
func TestCheckpointManifest(t *testing.T) {
	dev := must(cpu.New(cpu.Options{Threads: 1}))
	b := must(dev.Alloc(kernels.F32, 300_000)) // more than one write chunk
	h := make([]float32, b.Len())
	for i := range h {
		h[i] = float32(i)
	}
	dev.WriteF32(b, h)
	dir := t.TempDir()
	if err := SaveState(dev, dir, map[string]kernels.Buffer{"b": b}, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	cdir := filepath.Join(dir, CheckpointDir)
	checkManifest(t, cdir, stateTensors, stateRecord)
	files, verified, err := verifyCheckpoint(cdir)
	if err != nil || !verified || !slices.Equal(files, []string{stateTensors}) {
		t.Fatalf("verifyCheckpoint: %v, %v, %v", files, verified, err)
	}
	flipByte(t, filepath.Join(cdir, stateTensors), 100_000)
	err = LoadState(dev, dir, map[string]kernels.Buffer{"b": b})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(cdir, stateTensors)+" is corrupt (sha256 mismatch") {
		t.Errorf("LoadState of a damaged file: %v", err)
	}
}

// corruptCase damages a checkpoint; want is in the error of the resume.
type corruptCase struct {
	name   string
	damage func(t *testing.T, cdir string)
	want   func(cdir string) string
}

// flipCases flip a byte (first, middle, last) of each file, and remove
// each listed file but state.json (without which there is no checkpoint:
// TestResumeCleansAndRefuses).
func flipCases(files ...string) []corruptCase {
	var cs []corruptCase
	for _, f := range append(files, stateRecord, manifestFile) {
		for _, at := range []int{0, 1 << 30, -1} {
			cs = append(cs, corruptCase{
				name: fmt.Sprintf("%s %s byte", f, map[int]string{0: "first", 1 << 30: "middle", -1: "last"}[at]),
				damage: func(t *testing.T, cdir string) {
					path := filepath.Join(cdir, f)
					if at == 1<<30 {
						st, err := os.Stat(path)
						if err != nil {
							t.Fatal(err)
						}
						flipByte(t, path, int(st.Size()/2))
						return
					}
					flipByte(t, path, at)
				},
				want: func(cdir string) string { return filepath.Join(cdir, f) + " is corrupt" },
			})
		}
	}
	for _, f := range files {
		cs = append(cs, corruptCase{
			name:   f + " missing",
			damage: func(t *testing.T, cdir string) { os.Remove(filepath.Join(cdir, f)) },
			want:   func(cdir string) string { return filepath.Join(cdir, f) + " is missing, though SHA256SUMS lists it" },
		})
	}
	return cs
}

// TestResumeDetectsCorruption: a flipped byte in any checkpoint file —
// state.safetensors, state.json, the manifest itself — or a missing file
// is refused on --resume naming the file, before any state reaches the
// model, and the message says what to do.
func TestResumeDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	cdir := filepath.Join(dir, CheckpointDir)
	checkManifest(t, cdir, stateTensors, stateRecord)
	good := filepath.Join(t.TempDir(), "good")
	copyDir(t, cdir, good)
	for _, c := range flipCases(stateTensors) {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(cdir)
			copyDir(t, good, cdir)
			c.damage(t, cdir)
			s2 := newLin(t, 37, 5)
			cfg := baseConfig(dir)
			cfg.Resume = true
			_, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
			if err == nil || !strings.Contains(err.Error(), c.want(cdir)) || !strings.Contains(err.Error(), "no earlier checkpoint is kept") ||
				!strings.Contains(err.Error(), "--overwrite") {
				t.Fatalf("resume of a damaged checkpoint: %v\nwant an error with %q", err, c.want(cdir))
			}
			t.Log(err)
			if w := weights(s2); slices.ContainsFunc(w, func(v float32) bool { return v != 0 }) {
				t.Errorf("the damaged checkpoint reached the model: %v", w)
			}
		})
	}
	// ReadRecord checks state.json too.
	os.RemoveAll(cdir)
	copyDir(t, good, cdir)
	flipByte(t, filepath.Join(cdir, stateRecord), 10)
	var st ckptState
	if err := ReadRecord(dir, &st); err == nil || !strings.Contains(err.Error(), filepath.Join(cdir, stateRecord)+" is corrupt") {
		t.Errorf("ReadRecord of a damaged state.json: %v", err)
	}
}

// TestShardedResumeDetectsCorruption: the checkpoint of a 2-rank ZeRO-1
// run (each rank writes and hashes its own state-rank-R.safetensors; rank
// 0 gathers the digests into the manifest) is resumed on 2 ranks; a
// flipped byte in any of its files, or a missing rank file, is refused
// by every rank, naming the file.
func TestShardedResumeDetectsCorruption(t *testing.T) {
	cfg := Config{TrainSize: 13, MicroBatch: 2, GradAccum: 1, MaxSteps: 2, Schedule: "linear", Warmup: 1,
		ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 5, SaveEvery: 1, Fingerprint: "zero-ckpt", Log: zerolog.Nop(),
		Dir: t.TempDir()}
	run := func(cfg Config) []error {
		devs := []kernels.Device{must(cpu.New(cpu.Options{Threads: 1})), must(cpu.New(cpu.Options{Threads: 1}))}
		errs := make([]error, len(devs))
		disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
			s, tr := newLMStage(t, dev, kernels.F32, cfg.TrainSize, 0)
			cfg := cfg
			cfg.Comm, cfg.ZeRO = c, zero.Stage(1)
			_, errs[c.Rank()] = Run(context.Background(), dev, cfg, s, tr)
			return errs[c.Rank()]
		})
		return errs
	}
	if errs := run(cfg); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	cdir := filepath.Join(cfg.Dir, CheckpointDir)
	ranks := []string{fmt.Sprintf(rankTensors, 0), fmt.Sprintf(rankTensors, 1)}
	checkManifest(t, cdir, append(ranks, stateRecord)...)
	good := filepath.Join(t.TempDir(), "good")
	copyDir(t, cdir, good)
	cfg.Resume = true
	if errs := run(cfg); errs[0] != nil || errs[1] != nil {
		t.Fatalf("resume of the intact checkpoint: %v", errs)
	}
	for _, c := range flipCases(ranks...) {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(cdir)
			copyDir(t, good, cdir)
			c.damage(t, cdir)
			for r, err := range run(cfg) {
				if err == nil || !strings.Contains(err.Error(), c.want(cdir)) {
					t.Errorf("rank %d: resume of a damaged checkpoint: %v\nwant an error with %q", r, err, c.want(cdir))
				} else if r == 0 {
					t.Log(err)
				}
			}
		})
	}
}

// TestNonFiniteStateRefused: a checkpoint whose state itself holds a NaN
// or an infinity (its checksums right) is refused on --resume, naming the
// tensor and the first bad element.
func TestNonFiniteStateRefused(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	var rec ckptState
	if err := ReadRecord(dir, &rec); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tensor string
		at     int
		v      float32
	}{
		{"param.w", 3, float32(math.NaN())},
		{"adam.m.w@0", 0, float32(math.Inf(-1))},
		{"adam.v.w@0", 4, float32(math.Inf(1))},
	} {
		t.Run(c.tensor, func(t *testing.T) {
			s := newLin(t, 37, 5)
			opt, err := NewOptimizer(s.dev, s.trainable(), OptimizerConfig{AdamW: optim.DefaultAdamW, Schedule: "constant", Total: 1})
			if err != nil {
				t.Fatal(err)
			}
			bufs := map[string]kernels.Buffer{}
			opt.StateBuffers(bufs, "")
			if err := LoadState(s.dev, dir, bufs); err != nil {
				t.Fatal(err)
			}
			b := bufs[c.tensor]
			h := make([]float32, b.Len())
			s.dev.ReadF32(h, b)
			h[c.at] = c.v
			s.dev.WriteF32(b, h)
			if err := SaveState(s.dev, dir, bufs, rec); err != nil {
				t.Fatal(err)
			}
			s2 := newLin(t, 37, 5)
			cfg := baseConfig(dir)
			cfg.Resume = true
			_, err = Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
			want := fmt.Sprintf("state.safetensors: tensor %q: element %d is %v", c.tensor, c.at, c.v)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("resume of a checkpoint with %v: %v\nwant an error with %q", c.v, err, want)
			} else {
				t.Log(err)
			}
			h[c.at] = 0.5
			s.dev.WriteF32(b, h)
			if err := SaveState(s.dev, dir, bufs, rec); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestResumeWithoutManifest: a checkpoint written before checksums (no
// SHA256SUMS) still resumes, exactly, with a warning that it cannot be
// verified.
func TestResumeWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, CheckpointDir, manifestFile)); err != nil {
		t.Fatal(err)
	}
	s2 := newLin(t, 37, 5)
	cfg := baseConfig(dir)
	cfg.Resume = true
	var log bytes.Buffer
	cfg.Log = zerolog.New(&log)
	res, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
	if err != nil {
		t.Fatal(err)
	}
	if s2.calls != 0 || res.Steps != 15 || !slices.Equal(weights(s), weights(s2)) {
		t.Errorf("resume without a manifest: %d micro-batches recomputed, %d steps, weights equal %v",
			s2.calls, res.Steps, slices.Equal(weights(s), weights(s2)))
	}
	if !strings.Contains(log.String(), "cannot be verified") {
		t.Errorf("no warning that the checkpoint cannot be verified:\n%s", log.String())
	}
}

// TestResumeFallsBackToOld: when a save was cut after its second rename,
// before it removed checkpoint.old, and checkpoint/ then fails its
// checksums, --resume uses checkpoint.old (complete) with a warning and
// moves the damaged checkpoint aside; a checkpoint.old that is not
// complete itself (its removal was under way) is no fallback.
func TestResumeFallsBackToOld(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	cdir := filepath.Join(dir, CheckpointDir)
	old, corrupt := cdir+".old", cdir+".corrupt"
	copyDir(t, cdir, old)
	flipByte(t, filepath.Join(cdir, stateTensors), 200)

	// checkpoint.old half removed: no fallback.
	if err := os.Remove(filepath.Join(old, stateTensors)); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(dir)
	cfg.Resume = true
	s2 := newLin(t, 37, 5)
	_, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
	if err == nil || !strings.Contains(err.Error(), filepath.Join(cdir, stateTensors)+" is corrupt") ||
		!strings.Contains(err.Error(), filepath.Join(old, stateTensors)+" is missing") {
		t.Fatalf("resume with a damaged checkpoint and an incomplete checkpoint.old: %v", err)
	}
	if _, err := os.Stat(cdir); err != nil {
		t.Errorf("the damaged checkpoint was moved without a fallback: %v", err)
	}

	// checkpoint.old complete: the fallback.
	os.RemoveAll(old)
	copyDir(t, cdir, old)
	flipByte(t, filepath.Join(old, stateTensors), 200) // undo the damage in the copy
	var log bytes.Buffer
	cfg.Log = zerolog.New(&log)
	res, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
	if err != nil {
		t.Fatal(err)
	}
	if s2.calls != 0 || res.Steps != 15 || !slices.Equal(weights(s), weights(s2)) {
		t.Errorf("resume from checkpoint.old: %d micro-batches recomputed, %d steps, weights equal %v",
			s2.calls, res.Steps, slices.Equal(weights(s), weights(s2)))
	}
	if !strings.Contains(log.String(), "resuming from checkpoint.old") || !strings.Contains(log.String(), "sha256 mismatch") {
		t.Errorf("no warning of the fallback:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(corrupt, stateTensors)); err != nil {
		t.Errorf("the damaged checkpoint was not moved to checkpoint.corrupt: %v", err)
	}
	// The resumed run saved its checkpoint in place of checkpoint.old.
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("checkpoint.old after the resumed run: %v", err)
	}
	if _, _, err := verifyCheckpoint(cdir); err != nil {
		t.Errorf("the resumed run's checkpoint: %v", err)
	}
}

// FuzzParseManifest: parseManifest never panics, and what it accepts
// lists plain file names with their digests, which encodeManifest writes
// back into a manifest it reads the same.
func FuzzParseManifest(f *testing.F) {
	sum := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	f.Add(encodeManifest(map[string][]byte{stateRecord: sum(1), stateTensors: sum(2)}))
	f.Add(encodeManifest(map[string][]byte{stateRecord: sum(1), "state-rank-0.safetensors": sum(2), "state-rank-1.safetensors": sum(3)}))
	f.Add([]byte("# x\n" + strings.Repeat("0", 64) + "  state.json\n" + manifestTrailer + strings.Repeat("0", 64) + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sums, err := parseManifest("SHA256SUMS", b)
		if err != nil {
			return
		}
		raw := map[string][]byte{}
		for name, s := range sums {
			if name == "" || strings.ContainsAny(name, "/\n") || !isHexSum(s) {
				t.Fatalf("accepted %q: %q", name, s)
			}
			var d []byte
			fmt.Sscanf(s, "%x", &d)
			raw[name] = d
		}
		again, err := parseManifest("SHA256SUMS", encodeManifest(raw))
		if err != nil || len(again) != len(sums) {
			t.Fatalf("re-encoded manifest: %v, %v", again, err)
		}
		for name, s := range sums {
			if again[name] != s {
				t.Fatalf("%s: %s, re-read %s", name, s, again[name])
			}
		}
	})
}

// BenchmarkCheckpointHash measures what checksums cost a checkpoint of
// 128 MB: SHA-256 alone, a save with and without hashing (the hash runs
// beside the writes, asyncHash), and verifyCheckpoint (a read and a hash
// of every file). MB/s are of the checkpoint's bytes.
func BenchmarkCheckpointHash(b *testing.B) {
	const n = 32 << 20 // float32 elements: 128 MB
	dev := must(cpu.New(cpu.Options{Threads: 1}))
	buf := must(dev.Alloc(kernels.F32, n))
	h := make([]float32, n)
	for i := range h {
		h[i] = float32(i)
	}
	dev.WriteF32(buf, h)
	bufs := map[string]kernels.Buffer{"b": buf}
	dir := b.TempDir()
	b.Run("sha256", func(b *testing.B) {
		chunk := make([]byte, 1<<20)
		b.SetBytes(int64(len(chunk)))
		hs := sha256.New()
		for b.Loop() {
			hs.Write(chunk)
		}
	})
	b.Run("write/sha256", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			if _, err := writeTensors(dev, filepath.Join(dir, "x.safetensors"), bufs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write/none", func(b *testing.B) {
		b.SetBytes(4 * n)
		ts := []tensor.WriteTensor{{Name: "b", DType: tensor.F32, Shape: []int{n},
			Read: func(off int, dst []float32) { dev.ReadF32(dst, buf.Slice(off, len(dst))) }}}
		for b.Loop() {
			if err := tensor.WriteSafetensors(filepath.Join(dir, "x.safetensors"), ts, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := SaveState(dev, dir, bufs, map[string]int{"x": 1}); err != nil {
		b.Fatal(err)
	}
	b.Run("verify", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			if _, _, err := verifyCheckpoint(filepath.Join(dir, CheckpointDir)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestResumeAfterFinalCheckpoint: a run killed after its last checkpoint,
// at the end of training, resumes there and ends with the metrics of an
// uninterrupted run: the final evaluation's record once (the checkpoint
// does not cover it, so a record written before the kill is dropped and
// written again), however often it is resumed.
func TestResumeAfterFinalCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	want, err := ReadMetrics(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := want[len(want)-1]["eval_loss"]; !ok {
		t.Fatalf("the last record is not the final evaluation: %v", want[len(want)-1])
	}
	for range 2 {
		s2 := newLin(t, 37, 5)
		cfg := baseConfig(dir)
		cfg.Resume = true
		if _, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable()); err != nil {
			t.Fatal(err)
		}
		got, err := ReadMetrics(filepath.Join(dir, MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("after resuming at the end: %d metrics records, uninterrupted %d", len(got), len(want))
		}
		if g, w := got[len(got)-1]["eval_loss"], want[len(want)-1]["eval_loss"]; g != w {
			t.Errorf("final eval_loss %v, uninterrupted %v", g, w)
		}
	}
}
