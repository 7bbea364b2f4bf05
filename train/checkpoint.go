package train

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/internal/atomicfile"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/tensor"
)

// CheckpointDir is the name of the checkpoint folder inside the output
// directory.
const CheckpointDir = "checkpoint"

// Checkpoint files inside CheckpointDir: the buffers (float32 tensors named
// as given to SaveState) and a JSON record. Under ZeRO 1-3 each rank
// writes the ranges of the state it owns into state-rank-R.safetensors
// instead (rank 0 also the buffers every rank holds alike). SHA256SUMS
// (manifestFile) holds the SHA-256 of each of these files; nothing else
// is written into a checkpoint.
const (
	stateTensors = "state.safetensors"
	stateRecord  = "state.json"
	rankTensors  = "state-rank-%d.safetensors"
)

// ckptFormat is the version of state.json; checkpoints of another
// version are refused with a message. Format 3 names optimizer state by
// range (RangeName). SHA256SUMS came later without a new format: its
// files are the same, so an older gochat still reads a checkpoint with a
// manifest, and a checkpoint without one (from an older gochat) loads
// with a warning that it cannot be verified.
const ckptFormat = 3

// RangeName names the range of the logical tensor name that starts at
// element off: "name@off". A checkpoint may hold a tensor in any number of
// ranges; LoadState assembles a requested range from whichever saved
// ranges cover it, so state saved on N ranks (or at another ZeRO stage)
// loads on M.
func RangeName(name string, off int) string { return fmt.Sprintf("%s@%d", name, off) }

// parseRange splits a RangeName; ok is false for a plain name.
func parseRange(s string) (name string, off int, ok bool) {
	i := strings.LastIndexByte(s, '@')
	if i < 0 {
		return s, 0, false
	}
	off, err := strconv.Atoi(s[i+1:])
	if err != nil || off < 0 {
		return s, 0, false
	}
	return s[:i], off, true
}

// state.json of a training-loop checkpoint.
type ckptState struct {
	Format      int             `json:"format"`
	Fingerprint string          `json:"fingerprint"`
	Position    position        `json:"position"`
	Seed        uint64          `json:"seed"`
	MetricsRows int             `json:"metrics_rows"`
	Buffers     []string        `json:"buffers"`
	Ranks       int             `json:"ranks,omitempty"` // ranks that wrote state-rank-R files (ZeRO 1-3)
	Stage       json.RawMessage `json:"stage,omitempty"`
}

// SaveState writes a checkpoint to dir/checkpoint: the named device buffers
// into state.safetensors, record (JSON) into state.json and the SHA-256 of
// both into SHA256SUMS. Everything goes into a new temporary folder first,
// which then replaces the old checkpoint by renames, so a crash at any
// point leaves either the old or the new checkpoint complete, with its
// manifest. Buffers are streamed chunk by chunk, so a checkpoint never
// holds a host copy of the whole state, and hashed as they are streamed
// (no second read of the file). Buffers are stored as F32 tensors: BF16
// ones widened (exact), I32 ones bit for bit (their int32 bits as float32
// bits; LoadState reverses both).
func SaveState(dev kernels.Device, dir string, bufs map[string]kernels.Buffer, record any) error {
	tmp, err := os.MkdirTemp(dir, ".checkpoint-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp)
	sum, err := writeTensors(dev, filepath.Join(tmp, stateTensors), bufs)
	if err != nil {
		return err
	}
	return commitState(dir, tmp, record, map[string][]byte{stateTensors: sum})
}

// writeTensors streams bufs into a safetensors file at path and returns
// the file's SHA-256, computed from the bytes as they are written.
func writeTensors(dev kernels.Device, path string, bufs map[string]kernels.Buffer) ([]byte, error) {
	var ts []tensor.WriteTensor
	for _, name := range sortedKeys(bufs) {
		dev, b := bufferDevice(dev, bufs[name])
		read := func(off int, dst []float32) { dev.ReadF32(dst, b.Slice(off, len(dst))) }
		if b.DType() == kernels.I32 { // raw bits (AdamW's master low halves): stored bit for bit
			read = func(off int, dst []float32) {
				h := make([]int32, len(dst))
				dev.ReadI32(h, b.Slice(off, len(dst)))
				for i, v := range h {
					dst[i] = math.Float32frombits(uint32(v))
				}
			}
		}
		ts = append(ts, tensor.WriteTensor{Name: name, DType: tensor.F32, Shape: []int{b.Len()}, Read: read})
	}
	h := newAsyncHash()
	err := tensor.WriteSafetensorsTee(path, ts, map[string]string{"format": "gochat-checkpoint"}, h)
	sum := h.Sum()
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// commitState writes record (state.json) and then the manifest, of sums
// (the SHA-256 of the tensor files in tmp, by name) and of state.json,
// into the temporary checkpoint tmp whose tensor files are complete, then
// puts tmp in place of dir's checkpoint by renames: a committed checkpoint
// always has its manifest.
func commitState(dir, tmp string, record any, sums map[string][]byte) error {
	final := filepath.Join(dir, CheckpointDir)
	b, err := json.MarshalIndent(record, "", "  ")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, stateRecord), b); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	sum := sha256.Sum256(b)
	sums[stateRecord] = sum[:]
	if err := atomicfile.WriteFile(filepath.Join(tmp, manifestFile), encodeManifest(sums)); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	atomicfile.SyncDir(tmp)
	old := final + ".old"
	if _, err := os.Stat(filepath.Join(final, stateRecord)); err == nil {
		os.RemoveAll(old)
		if err := rename(final, old); err != nil {
			return fmt.Errorf("write checkpoint: %w", err)
		}
	} else {
		// No complete checkpoint/: checkpoint.old, left by a save cut
		// between the renames, is the last complete one until tmp is in
		// place.
		os.RemoveAll(final)
	}
	if err := rename(tmp, final); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	os.RemoveAll(old)
	atomicfile.SyncDir(dir)
	return nil
}

// rename is os.Rename (a test makes it fail).
var rename = os.Rename

// ReadRecord reads the JSON record of the checkpoint in dir into record,
// after checking it against the checkpoint's manifest (when it has one).
func ReadRecord(dir string, record any) error {
	return readRecord(checkpointPath(dir), record)
}

// readRecord reads the record of the checkpoint folder cdir.
func readRecord(cdir string, record any) error {
	path := filepath.Join(cdir, stateRecord)
	b, err := readVerified(cdir, stateRecord)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, record); err != nil {
		return fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return nil
}

// LoadState restores the named device buffers from the checkpoint in dir;
// each must be present with its exact size. Every file of the checkpoint
// is first checked against its SHA-256 in SHA256SUMS (verifyCheckpoint),
// so nothing of a damaged checkpoint reaches the device. A buffer named by
// RangeName is assembled from the saved ranges of its tensor that cover
// it, in any of the checkpoint's files. F32 and BF16 buffers must come
// back finite: a NaN or an infinity is refused, naming the tensor and the
// element (I32 buffers hold raw bits and are not checked).
func LoadState(dev kernels.Device, dir string, bufs map[string]kernels.Buffer) error {
	cdir := checkpointPath(dir)
	files, _, err := verifyCheckpoint(cdir)
	if err != nil {
		return err
	}
	return loadState(dev, cdir, files, bufs)
}

// loadState is LoadState from the tensor files (names) of the checkpoint
// folder cdir, already verified.
func loadState(dev kernels.Device, cdir string, files []string, bufs map[string]kernels.Buffer) error {
	if len(files) == 0 {
		return fmt.Errorf("checkpoint %s: no %s", cdir, stateTensors)
	}
	// A saved tensor, as a range of its logical tensor: a plain tensor is
	// its range from 0, so a range loads from a plain tensor and the
	// reverse.
	type saved struct {
		ck         *tensor.Checkpoint
		file, name string
		off, len   int
	}
	ranges := map[string][]*saved{} // by logical name
	for _, name := range files {
		f := filepath.Join(cdir, name)
		ck, err := tensor.Open(f)
		if err != nil {
			return err
		}
		defer ck.Close()
		for _, name := range ck.Names() {
			info, _ := ck.Info(name)
			base, off, _ := parseRange(name)
			ranges[base] = append(ranges[base], &saved{ck: ck, file: f, name: name, off: off, len: info.Numel()})
		}
	}
	// Which saved tensors cover which requested buffers, so each saved
	// tensor is read once.
	type want struct {
		b            kernels.Buffer
		name         string
		off, covered int
	}
	var wants []*want
	var reads []*saved
	covers := map[*saved][]*want{}
	for _, name := range sortedKeys(bufs) {
		b := bufs[name]
		base, off, isRange := parseRange(name)
		if len(ranges[base]) == 0 {
			return fmt.Errorf("checkpoint %s: tensor %q is missing", cdir, name)
		}
		w := &want{b: b, name: name, off: off}
		wants = append(wants, w)
		for _, s := range ranges[base] {
			if !isRange && s.name == name && s.len != b.Len() { // a whole tensor of another size
				return fmt.Errorf("checkpoint %s: tensor %q has %d elements, the model %d", cdir, name, s.len, b.Len())
			}
			if s.off < off+b.Len() && off < s.off+s.len {
				if covers[s] == nil {
					reads = append(reads, s)
				}
				covers[s] = append(covers[s], w)
			}
		}
	}
	for _, s := range reads {
		h := make([]float32, s.len)
		if err := s.ck.ReadF32(s.name, h); err != nil {
			return err
		}
		for _, w := range covers[s] {
			lo, hi := max(s.off, w.off), min(s.off+s.len, w.off+w.b.Len())
			if w.b.DType() != kernels.I32 {
				if i := firstNonFinite(h[lo-s.off : hi-s.off]); i >= 0 {
					i += lo - s.off
					return fmt.Errorf("%s: tensor %q: element %d is %v: the checkpoint holds state that is not finite, so the run cannot resume from it; start afresh with --overwrite",
						s.file, s.name, i, h[i])
				}
			}
			writeStored(dev, w.b.Slice(lo-w.off, hi-lo), h[lo-s.off:hi-s.off])
			w.covered += hi - lo
		}
	}
	for _, w := range wants {
		if w.covered != w.b.Len() {
			return fmt.Errorf("checkpoint %s: the saved ranges cover %d of the %d elements of %q (a checkpoint file missing?)", cdir, w.covered, w.b.Len(), w.name)
		}
	}
	return nil
}

// firstNonFinite is the index of the first NaN or infinity in x, or -1.
func firstNonFinite(x []float32) int {
	for i, v := range x {
		if v-v != 0 { // NaN - NaN and Inf - Inf are NaN
			return i
		}
	}
	return -1
}

// writeStored writes stored values into dst: F32 tensors hold BF16
// buffers widened and I32 buffers bit for bit (writeTensors).
func writeStored(dev kernels.Device, dst kernels.Buffer, h []float32) {
	dev, dst = bufferDevice(dev, dst)
	if dst.DType() == kernels.I32 {
		bits := make([]int32, len(h))
		for i, v := range h {
			bits[i] = int32(math.Float32bits(v))
		}
		dev.WriteI32(dst, bits)
		return
	}
	dev.WriteF32(dst, h)
}

// checkpoint writes the loop's full training state to Dir/checkpoint.
func (l *loop) checkpoint() error {
	if l.cfg.Dir == "" {
		return nil
	}
	sh, ok := l.st.(shardedState)
	sharded := ok && sh.Sharded() && l.ranks > 1
	if !l.writer && !sharded {
		// Rank 0 writes the checkpoint: at ZeRO stage 0 every rank holds
		// the same parameters and optimizer state.
		l.pos.LastCkpt = l.pos.Step
		return nil
	}
	if l.writer {
		if err := l.metrics.Sync(); err != nil {
			return fmt.Errorf("write metrics: %w", err)
		}
	}
	pos := l.pos
	pos.LastCkpt = pos.Step
	bufs, rec := l.st.State()
	stage, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	st := ckptState{Format: ckptFormat, Fingerprint: l.cfg.Fingerprint, Position: pos, Seed: l.cfg.Seed,
		MetricsRows: l.metrics.rows, Buffers: sortedKeys(bufs), Stage: stage}
	if sharded {
		err = l.saveSharded(bufs, st)
	} else {
		err = SaveState(l.dev, l.cfg.Dir, bufs, st)
	}
	if err != nil {
		return err
	}
	l.pos.LastCkpt = pos.Step
	l.cfg.Log.Debug().Int("step", pos.Step).Msg("checkpoint")
	return nil
}

// saveSharded writes a checkpoint whose state the ranks hold in parts
// (ZeRO 1-3): every rank writes its ranges (RangeName) into
// state-rank-R.safetensors of one temporary folder, rank 0 also the
// buffers every rank holds alike, and the file's SHA-256 (hashed as it is
// written) into the side file state-rank-R.sha256; once all are written,
// rank 0 gathers the side files into the manifest and commits the folder
// as SaveState does. A rank that fails returns its error, which ends the
// job (the CLI aborts every rank), and the previous checkpoint stays
// whole.
func (l *loop) saveSharded(bufs map[string]kernels.Buffer, record ckptState) error {
	c := l.cfg.Comm
	tmp := filepath.Join(l.cfg.Dir, fmt.Sprintf(".checkpoint-step-%d", record.Position.Step))
	if l.writer {
		os.RemoveAll(tmp)
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return fmt.Errorf("write checkpoint: %w", err)
		}
	}
	if err := c.Barrier(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	mine := map[string]kernels.Buffer{}
	for name, b := range bufs {
		if _, _, ranged := parseRange(name); ranged || l.writer {
			mine[name] = b
		}
	}
	name := fmt.Sprintf(rankTensors, l.rank)
	sum, err := writeTensors(l.dev, filepath.Join(tmp, name), mine)
	if err != nil {
		return fmt.Errorf("rank %d: %w", l.rank, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, fmt.Sprintf(sumFile, l.rank)), fmt.Appendf(nil, "%x  %s\n", sum, name)); err != nil {
		return fmt.Errorf("rank %d: write checkpoint: %w", l.rank, err)
	}
	atomicfile.SyncDir(tmp)
	if err := c.Barrier(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if l.writer {
		record.Ranks = l.ranks
		sums := map[string][]byte{}
		err := readRankSums(tmp, l.ranks, sums)
		if err == nil {
			err = commitState(l.cfg.Dir, tmp, record, sums)
		}
		if err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := c.Barrier(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
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

// checkpointPath is the complete checkpoint in dir: checkpoint/, or
// checkpoint.old/ when a save was interrupted between its two renames
// (SaveState), or checkpoint/ when there is neither.
func checkpointPath(dir string) string {
	for _, name := range []string{CheckpointDir, CheckpointDir + ".old"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(filepath.Join(p, stateRecord)); err == nil {
			return p
		}
	}
	return filepath.Join(dir, CheckpointDir)
}

// HasCheckpoint reports whether dir holds a complete training checkpoint
// (checkpoint/, or checkpoint.old/ left by a save interrupted between its
// renames).
func HasCheckpoint(dir string) bool {
	_, err := os.Stat(filepath.Join(checkpointPath(dir), stateRecord))
	return err == nil
}

// CheckpointFingerprint returns the fingerprint of the run that wrote the
// checkpoint in dir.
func CheckpointFingerprint(dir string) (string, error) {
	var st ckptState
	err := ReadRecord(dir, &st)
	return st.Fingerprint, err
}

// RemoveCheckpoint deletes dir's checkpoint once a run's outputs are
// complete. It first renames it to a temporary name (which the next start
// cleans up if the removal is killed), so dir never holds a half-deleted
// checkpoint that --resume would refuse.
func RemoveCheckpoint(dir string) error {
	tmp := filepath.Join(dir, ".checkpoint-removed")
	os.RemoveAll(tmp)
	if err := os.Rename(filepath.Join(dir, CheckpointDir), tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(tmp)
}

// removePartialCheckpoints deletes the temporary folders of saves that
// were killed before their rename (SaveState writes into .checkpoint-*):
// they are never complete, and each is the size of a checkpoint.
func removePartialCheckpoints(dir string, log zerolog.Logger) {
	partial, _ := filepath.Glob(filepath.Join(dir, ".checkpoint-*"))
	for _, p := range partial {
		if err := os.RemoveAll(p); err != nil {
			log.Warn().Err(err).Str("dir", p).Msg("partial checkpoint not removed")
			continue
		}
		log.Info().Str("dir", p).Msg("removed the partial checkpoint of an interrupted save")
	}
}

// loadCheckpoint restores the state saved in cfg.Dir into st, once every
// file of the checkpoint has matched its checksum (verifiedCheckpoint).
// ok is false when there is no checkpoint (a fresh start); rows is the
// number of metrics records the checkpoint covers.
func loadCheckpoint(dev kernels.Device, cfg Config, st RoundStage) (pos position, rows int, ok bool, err error) {
	if !HasCheckpoint(cfg.Dir) {
		if _, err := os.Stat(filepath.Join(cfg.Dir, CheckpointDir)); err == nil {
			return position{}, 0, false, fmt.Errorf("checkpoint in %s is incomplete (no %s); remove it to start afresh, or pass --overwrite",
				filepath.Join(cfg.Dir, CheckpointDir), stateRecord)
		}
		return position{}, 0, false, nil
	}
	dir, files, err := verifiedCheckpoint(cfg)
	if err != nil {
		return position{}, 0, false, err
	}
	var ck ckptState
	if err := readRecord(dir, &ck); err != nil {
		return position{}, 0, false, err
	}
	switch {
	case ck.Format != ckptFormat:
		return position{}, 0, false, fmt.Errorf("checkpoint in %s has format %d, this gochat reads %d; start afresh with --overwrite", dir, ck.Format, ckptFormat)
	case ck.Fingerprint != cfg.Fingerprint:
		return position{}, 0, false, fmt.Errorf("checkpoint in %s belongs to a different run (its settings differ); use another --output-dir, or --overwrite to start afresh", dir)
	case ck.Seed != cfg.Seed:
		return position{}, 0, false, fmt.Errorf("checkpoint in %s was made with --seed %d, not %d", dir, ck.Seed, cfg.Seed)
	}
	bufs, _ := st.State()
	if err := loadState(dev, dir, files, bufs); err != nil {
		return position{}, 0, false, err
	}
	if err := st.Restore(ck.Stage); err != nil {
		return position{}, 0, false, fmt.Errorf("checkpoint in %s: %w", dir, err)
	}
	return ck.Position, ck.MetricsRows, true, nil
}

// verifiedCheckpoint checks the checkpoint in cfg.Dir against its
// manifest and returns its folder and tensor files. When checkpoint/
// fails and checkpoint.old passes — the previous checkpoint, left whole
// by a save cut after its renames but before it removed checkpoint.old —
// it resumes from checkpoint.old with a warning, and rank 0 moves the
// damaged checkpoint/ aside to checkpoint.corrupt (so the next save keeps
// checkpoint.old until its own is in place). A checkpoint.old that fails
// too (its removal was under way), or has no manifest, is no fallback. A
// checkpoint without a manifest (an older gochat's) is used with a
// warning. Otherwise a damaged checkpoint is an error: gochat keeps no
// earlier checkpoint to fall back on.
func verifiedCheckpoint(cfg Config) (cdir string, files []string, err error) {
	cdir = checkpointPath(cfg.Dir)
	files, verified, err := verifyCheckpoint(cdir)
	if err == nil {
		if !verified {
			cfg.Log.Warn().Str("dir", cdir).Msgf("the checkpoint has no %s (an older gochat wrote it): its files cannot be verified", manifestFile)
		}
		return cdir, files, nil
	}
	old := filepath.Join(cfg.Dir, CheckpointDir+".old")
	if _, serr := os.Stat(filepath.Join(old, stateRecord)); cdir == old || serr != nil {
		return "", nil, fmt.Errorf("%w; the checkpoint cannot be resumed, and no earlier checkpoint is kept: restore %s from a copy, or start afresh with --overwrite", err, cdir)
	}
	oldFiles, verified, oerr := verifyCheckpoint(old)
	if oerr == nil && !verified {
		oerr = fmt.Errorf("it has no %s", manifestFile)
	}
	if oerr != nil {
		return "", nil, fmt.Errorf("%w; the checkpoint cannot be resumed, nor the older %s left by an interrupted save (%v): restore %s from a copy, or start afresh with --overwrite", err, old, oerr, cdir)
	}
	ev := cfg.Log.Warn().Err(err).Str("dir", old)
	if cfg.rank() == 0 {
		corrupt := filepath.Join(cfg.Dir, CheckpointDir+".corrupt")
		os.RemoveAll(corrupt)
		if rerr := os.Rename(cdir, corrupt); rerr != nil {
			return "", nil, fmt.Errorf("%w; %s is complete, but moving the damaged checkpoint aside failed: %w", err, old, rerr)
		}
		ev = ev.Str("moved_to", corrupt)
	}
	ev.Msg("the checkpoint is damaged; resuming from checkpoint.old, the complete checkpoint before it (an interrupted save left it)")
	return old, oldFiles, nil
}
