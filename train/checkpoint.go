package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gochat-ai/gochat/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/tensor"
)

// CheckpointDir is the name of the checkpoint folder inside the output
// directory.
const CheckpointDir = "checkpoint"

// state.json of a checkpoint.
type ckptState struct {
	Format      int      `json:"format"`
	Fingerprint string   `json:"fingerprint"`
	Position    position `json:"position"`
	Seed        uint64   `json:"seed"`
	OptSteps    int      `json:"optimizer_steps"`
	MetricsRows int      `json:"metrics_rows"`
	Buffers     []string `json:"buffers"`
}

// checkpoint writes the full training state to Dir/checkpoint: into a new
// temporary folder first, which then replaces the old checkpoint by
// renames, so a crash leaves either the old or the new one complete.
func (l *loop) checkpoint() error {
	if l.cfg.Dir == "" {
		return nil
	}
	final := filepath.Join(l.cfg.Dir, CheckpointDir)
	tmp, err := os.MkdirTemp(l.cfg.Dir, ".checkpoint-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp)
	pos := l.pos
	pos.LastCkpt = pos.Step
	var ts []tensor.WriteTensor
	names := sortedKeys(l.tr.State)
	for _, name := range names {
		ts = append(ts, readTensor(l.dev, "param."+name, l.tr.State[name]))
	}
	m, v := l.opt.Moments()
	for i := range m {
		ts = append(ts, readTensor(l.dev, fmt.Sprintf("adam.m.%d", i), m[i]), readTensor(l.dev, fmt.Sprintf("adam.v.%d", i), v[i]))
	}
	if err := tensor.WriteSafetensors(filepath.Join(tmp, "state.safetensors"), ts, map[string]string{"format": "gochat-train"}); err != nil {
		return err
	}
	st := ckptState{Format: 1, Fingerprint: l.cfg.Fingerprint, Position: pos, Seed: l.cfg.Seed,
		OptSteps: l.opt.Steps(), MetricsRows: l.metrics.rows, Buffers: names}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "state.json"), b, 0o644); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	old := final + ".old"
	os.RemoveAll(old)
	if err := os.Rename(final, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	os.RemoveAll(old)
	l.pos.LastCkpt = pos.Step
	return syncDir(l.cfg.Dir)
}

// readTensor streams a device buffer into a checkpoint file chunk by chunk,
// so a checkpoint never holds a host copy of the whole state.
func readTensor(dev kernels.Device, name string, b kernels.Buffer) tensor.WriteTensor {
	return tensor.WriteTensor{Name: name, DType: tensor.F32, Shape: []int{b.Len()},
		Read: func(off int, dst []float32) { dev.ReadF32(dst, b.Slice(off, len(dst))) }}
}

func syncDir(dir string) error {
	atomicfile.SyncDir(dir)
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// HasCheckpoint reports whether dir holds a training checkpoint.
func HasCheckpoint(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, CheckpointDir, "state.json"))
	return err == nil
}

// CheckpointFingerprint returns the fingerprint of the run that wrote the
// checkpoint in dir.
func CheckpointFingerprint(dir string) (string, error) {
	st, err := readState(dir)
	return st.Fingerprint, err
}

func readState(dir string) (ckptState, error) {
	path := filepath.Join(dir, CheckpointDir, "state.json")
	var st ckptState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return st, nil
}

// loadCheckpoint restores the state saved in cfg.Dir. ok is false when
// there is no checkpoint (a fresh start).
func loadCheckpoint(dev kernels.Device, cfg Config, tr Trainable, opt *optim.AdamW) (position, bool, error) {
	if !HasCheckpoint(cfg.Dir) {
		return position{}, false, nil
	}
	st, err := readState(cfg.Dir)
	if err != nil {
		return position{}, false, err
	}
	dir := filepath.Join(cfg.Dir, CheckpointDir)
	if st.Fingerprint != cfg.Fingerprint {
		return position{}, false, fmt.Errorf("checkpoint in %s belongs to a different run (its settings differ); use another --output-dir, or --overwrite to start afresh", dir)
	}
	if st.Seed != cfg.Seed {
		return position{}, false, fmt.Errorf("checkpoint in %s was made with --seed %d, not %d", dir, st.Seed, cfg.Seed)
	}
	ck, err := tensor.Open(filepath.Join(dir, "state.safetensors"))
	if err != nil {
		return position{}, false, err
	}
	defer ck.Close()
	load := func(name string, b kernels.Buffer) error {
		info, ok := ck.Info(name)
		if !ok {
			return fmt.Errorf("checkpoint %s: tensor %q is missing", dir, name)
		}
		if info.Numel() != b.Len() {
			return fmt.Errorf("checkpoint %s: tensor %q has %d elements, the model %d", dir, name, info.Numel(), b.Len())
		}
		h := make([]float32, b.Len())
		if err := ck.ReadF32(name, h); err != nil {
			return err
		}
		dev.WriteF32(b, h)
		return nil
	}
	for name, b := range tr.State {
		if err := load("param."+name, b); err != nil {
			return position{}, false, err
		}
	}
	m, v := opt.Moments()
	for i := range m {
		if err := load(fmt.Sprintf("adam.m.%d", i), m[i]); err != nil {
			return position{}, false, err
		}
		if err := load(fmt.Sprintf("adam.v.%d", i), v[i]); err != nil {
			return position{}, false, err
		}
	}
	opt.SetSteps(st.OptSteps)
	return st.Position, true, nil
}
