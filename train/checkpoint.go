package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/gochat-ai/gochat/internal/atomicfile"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/tensor"
)

// CheckpointDir is the name of the checkpoint folder inside the output
// directory.
const CheckpointDir = "checkpoint"

// Checkpoint files inside CheckpointDir: the buffers (float32 tensors named
// as given to SaveState) and a JSON record.
const (
	stateTensors = "state.safetensors"
	stateRecord  = "state.json"
)

// state.json of a training-loop checkpoint.
type ckptState struct {
	Format      int      `json:"format"`
	Fingerprint string   `json:"fingerprint"`
	Position    position `json:"position"`
	Seed        uint64   `json:"seed"`
	OptSteps    int      `json:"optimizer_steps"`
	MetricsRows int      `json:"metrics_rows"`
	Buffers     []string `json:"buffers"`
}

// SaveState writes a checkpoint to dir/checkpoint: the named device buffers
// into state.safetensors and record (JSON) into state.json. Everything
// goes into a new temporary folder first, which then replaces the old
// checkpoint by renames, so a crash at any point leaves either the old or
// the new checkpoint complete. Buffers are streamed chunk by chunk, so a
// checkpoint never holds a host copy of the whole state.
func SaveState(dev kernels.Device, dir string, bufs map[string]kernels.Buffer, record any) error {
	final := filepath.Join(dir, CheckpointDir)
	tmp, err := os.MkdirTemp(dir, ".checkpoint-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp)
	var ts []tensor.WriteTensor
	for _, name := range sortedKeys(bufs) {
		b := bufs[name]
		ts = append(ts, tensor.WriteTensor{Name: name, DType: tensor.F32, Shape: []int{b.Len()},
			Read: func(off int, dst []float32) { dev.ReadF32(dst, b.Slice(off, len(dst))) }})
	}
	if err := tensor.WriteSafetensors(filepath.Join(tmp, stateTensors), ts, map[string]string{"format": "gochat-checkpoint"}); err != nil {
		return err
	}
	b, err := json.MarshalIndent(record, "", "  ")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, stateRecord), b, 0o644); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	atomicfile.SyncDir(tmp)
	old := final + ".old"
	os.RemoveAll(old)
	if err := os.Rename(final, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	os.RemoveAll(old)
	atomicfile.SyncDir(dir)
	return nil
}

// ReadRecord reads the JSON record of the checkpoint in dir into record.
func ReadRecord(dir string, record any) error {
	path := filepath.Join(dir, CheckpointDir, stateRecord)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, record); err != nil {
		return fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return nil
}

// LoadState restores the named device buffers from the checkpoint in dir;
// each must be present with its exact size.
func LoadState(dev kernels.Device, dir string, bufs map[string]kernels.Buffer) error {
	cdir := filepath.Join(dir, CheckpointDir)
	ck, err := tensor.Open(filepath.Join(cdir, stateTensors))
	if err != nil {
		return err
	}
	defer ck.Close()
	for _, name := range sortedKeys(bufs) {
		b := bufs[name]
		info, ok := ck.Info(name)
		if !ok {
			return fmt.Errorf("checkpoint %s: tensor %q is missing", cdir, name)
		}
		if info.Numel() != b.Len() {
			return fmt.Errorf("checkpoint %s: tensor %q has %d elements, the model %d", cdir, name, info.Numel(), b.Len())
		}
		h := make([]float32, b.Len())
		if err := ck.ReadF32(name, h); err != nil {
			return err
		}
		dev.WriteF32(b, h)
	}
	return nil
}

// OptimizerState adds an optimizer's moments to bufs under prefix
// (prefix+"m.0", prefix+"v.0", ...), for SaveState and LoadState.
func OptimizerState(bufs map[string]kernels.Buffer, prefix string, opt *optim.AdamW) {
	m, v := opt.Moments()
	for i := range m {
		bufs[fmt.Sprintf("%sm.%d", prefix, i)] = m[i]
		bufs[fmt.Sprintf("%sv.%d", prefix, i)] = v[i]
	}
}

// loopBuffers are the buffers of a training-loop checkpoint.
func loopBuffers(tr Trainable, opt *optim.AdamW) map[string]kernels.Buffer {
	bufs := map[string]kernels.Buffer{}
	for name, b := range tr.State {
		bufs["param."+name] = b
	}
	OptimizerState(bufs, "adam.", opt)
	return bufs
}

// checkpoint writes the loop's full training state to Dir/checkpoint.
func (l *loop) checkpoint() error {
	if l.cfg.Dir == "" {
		return nil
	}
	pos := l.pos
	pos.LastCkpt = pos.Step
	st := ckptState{Format: 1, Fingerprint: l.cfg.Fingerprint, Position: pos, Seed: l.cfg.Seed,
		OptSteps: l.opt.Steps(), MetricsRows: l.metrics.rows, Buffers: sortedKeys(l.tr.State)}
	if err := SaveState(l.dev, l.cfg.Dir, loopBuffers(l.tr, l.opt), st); err != nil {
		return err
	}
	l.pos.LastCkpt = pos.Step
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
	_, err := os.Stat(filepath.Join(dir, CheckpointDir, stateRecord))
	return err == nil
}

// CheckpointFingerprint returns the fingerprint of the run that wrote the
// checkpoint in dir.
func CheckpointFingerprint(dir string) (string, error) {
	var st ckptState
	err := ReadRecord(dir, &st)
	return st.Fingerprint, err
}

// loadCheckpoint restores the state saved in cfg.Dir. ok is false when
// there is no checkpoint (a fresh start).
func loadCheckpoint(dev kernels.Device, cfg Config, tr Trainable, opt *optim.AdamW) (position, bool, error) {
	if !HasCheckpoint(cfg.Dir) {
		return position{}, false, nil
	}
	var st ckptState
	if err := ReadRecord(cfg.Dir, &st); err != nil {
		return position{}, false, err
	}
	dir := filepath.Join(cfg.Dir, CheckpointDir)
	if st.Fingerprint != cfg.Fingerprint {
		return position{}, false, fmt.Errorf("checkpoint in %s belongs to a different run (its settings differ); use another --output-dir, or --overwrite to start afresh", dir)
	}
	if st.Seed != cfg.Seed {
		return position{}, false, fmt.Errorf("checkpoint in %s was made with --seed %d, not %d", dir, st.Seed, cfg.Seed)
	}
	if err := LoadState(dev, cfg.Dir, loopBuffers(tr, opt)); err != nil {
		return position{}, false, err
	}
	opt.SetSteps(st.OptSteps)
	return st.Position, true, nil
}
