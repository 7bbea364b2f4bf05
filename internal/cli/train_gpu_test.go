package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/kernels/cuda"
	"github.com/gochat-ai/gochat/plan"
)

// gpuBoard is a stand-in GPU's memory as its driver counts it: the bytes
// of every buffer any device opened on it holds (cuMemGetInfo's view,
// across contexts), and the devices opened.
type gpuBoard struct {
	mu     sync.Mutex
	total  int64
	used   int64
	opened []*boardGPU
}

// open opens a device on the board (Globals.OpenGPU).
func (b *gpuBoard) open(g *Globals, ordinal int) (kernels.Device, error) {
	c, err := newCPU(g)
	if err != nil {
		return nil, err
	}
	d := &boardGPU{Device: c, board: b, bufs: map[bufKey]boardBuf{}}
	b.mu.Lock()
	b.opened = append(b.opened, d)
	b.mu.Unlock()
	return d, nil
}

// globals are a command's Globals with the GPUs on the board and a host of
// 64 GiB, and the buffer its log goes to.
func (b *gpuBoard) globals() (*Globals, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &Globals{In: strings.NewReader(""), Out: &stdout, Err: &stderr, OpenGPU: b.open,
		Memory: func() (plan.Memory, error) {
			return plan.Memory{MemAvailable: 64 << 30, CgroupFree: -1, Available: 64 << 30}, nil
		}}, &stderr
}

// boardGPU is a device on a gpuBoard: a CPU device computes, the board
// counts its buffers as GPU memory, and it offers what kernels/cuda's
// Device offers gochat train: the GPU's free memory (MemInfo), Close, and
// Mark/ReleaseSince/ResetPeak. It counts its own live bytes and peak.
type boardGPU struct {
	*cpu.Device
	board      *gpuBoard
	mu         sync.Mutex
	bufs       map[bufKey]boardBuf
	seq        uint64
	live, peak int64
	closed     bool
}

type bufKey struct {
	p  uintptr
	n  int
	dt kernels.DType
}

type boardBuf struct {
	b   kernels.Buffer
	seq uint64
}

func key(b kernels.Buffer) bufKey {
	return bufKey{reflect.ValueOf(b).Pointer(), b.Len(), b.DType()}
}

func bytesOf(b kernels.Buffer) int64 { return int64(b.Len()) * int64(b.DType().Size()) }

func (d *boardGPU) Name() string { return "cuda:0 (board stand-in)" }

func (d *boardGPU) Alloc(dt kernels.DType, n int) (kernels.Buffer, error) {
	b, err := d.Device.Alloc(dt, n)
	if err != nil || n == 0 {
		return b, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		panic("Alloc on a closed device")
	}
	d.seq++
	d.bufs[key(b)] = boardBuf{b, d.seq}
	d.live += bytesOf(b)
	d.peak = max(d.peak, d.live)
	d.board.mu.Lock()
	d.board.used += bytesOf(b)
	d.board.mu.Unlock()
	return b, nil
}

func (d *boardGPU) Free(b kernels.Buffer) {
	if b == nil || b.Len() == 0 {
		return
	}
	d.mu.Lock()
	k := key(b)
	if _, ok := d.bufs[k]; !ok {
		d.mu.Unlock()
		panic(fmt.Sprintf("Free of a buffer %s does not hold (freed before, or another device's)", d.Name()))
	}
	delete(d.bufs, k)
	d.live -= bytesOf(b)
	d.board.mu.Lock()
	d.board.used -= bytesOf(b)
	d.board.mu.Unlock()
	d.mu.Unlock()
	d.Device.Free(b)
}

func (d *boardGPU) MemStats() kernels.MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return kernels.MemStats{Live: d.live, Peak: d.peak}
}

func (d *boardGPU) MemInfo() (free, total int64, err error) {
	d.board.mu.Lock()
	defer d.board.mu.Unlock()
	return d.board.total - d.board.used, d.board.total, nil
}

func (d *boardGPU) Mark() cuda.Mark {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cuda.Mark(d.seq)
}

func (d *boardGPU) ReleaseSince(m cuda.Mark) (freed int64) {
	d.mu.Lock()
	var left []kernels.Buffer
	for _, b := range d.bufs {
		if b.seq > uint64(m) {
			left = append(left, b.b)
		}
	}
	d.mu.Unlock()
	for _, b := range left {
		freed += bytesOf(b)
		d.Free(b)
	}
	return freed
}

func (d *boardGPU) ResetPeak() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.peak = d.live
}

func (d *boardGPU) Close() error {
	d.ReleaseSince(0)
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

// TestTrainOnOneGPU runs gochat train on a stand-in GPU: the job opens one
// device, which its communicator and every step use (NCCL's Comm works on
// the buffers of the device it was built on only); each step gives back
// everything it allocated there when it ends, so that every step's
// pre-flight finds the GPU as free as step 1's did (and as free as
// before the job), and the device is closed at the end with nothing held.
// Each step logs its own device peak, the same as on the CPU, where each
// step has its own device; and the models are byte-identical to the CPU
// run's.
func TestTrainOnOneGPU(t *testing.T) {
	mdir := tinyModel(t)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.yaml")
	os.WriteFile(recipe, []byte(`description: test
steps:
  sft: {data-split: "1,0,0", max-seq-len: 48, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  reward: {data-split: "0,1,0", max-seq-len: 48, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  ppo: {data-split: "0,0,1", max-prompt-seq-len: 100, max-answer-seq-len: 6, per-device-generation-batch-size: 4,
        per-device-training-batch-size: 4, max-steps: 1, num-warmup-steps: 0, data-cache: "off", enable-ema: true}
`), 0o644)
	args := func(device, out string) []string {
		return []string{"--device", device, "--log-format", "json", "train", "--actor", mdir, "--reward", mdir, "--data", sample(),
			"--recipe", recipe, "--dtype", "fp32", "--output-dir", out}
	}
	board := &gpuBoard{total: 80 << 30}
	g, stderr := board.globals()
	gpuOut := filepath.Join(dir, "gpu")
	if code := execute(g, args("cuda", gpuOut)); code != 0 {
		t.Fatalf("train on the stand-in GPU: exit %d: %s", code, lastLine(stderr.String()))
	}
	log := stderr.String()

	if n := len(board.opened); n != 1 {
		t.Errorf("the job opened %d devices on the GPU, want 1 for its communicator and all its steps", n)
	}
	var free []int64
	for _, rec := range logLines(log) {
		if f, ok := rec["gpu_free_bytes"].(float64); ok {
			free = append(free, int64(f))
		}
	}
	if len(free) != 4 { // the job's plan of the three steps, then each step's pre-flight
		t.Fatalf("%d pre-flights read the GPU's free memory, want 4:\n%s", len(free), log)
	}
	for i, f := range free[1:] {
		if f != free[0] {
			t.Errorf("step %d's pre-flight found %d bytes of the GPU free, %d less than before step 1 (the earlier steps' memory is still held)", i+1, f, free[0]-f)
		}
	}
	board.mu.Lock()
	if board.used != 0 {
		t.Errorf("after the job the GPU holds %d bytes", board.used)
	}
	board.mu.Unlock()
	for i, d := range board.opened {
		if !d.closed {
			t.Errorf("device %d was not closed", i)
		}
	}

	// The CPU run: the same steps, each on its own device.
	cpuOut := filepath.Join(dir, "cpu")
	_, cpuLog, code := run(t, args("cpu", cpuOut)...)
	if code != 0 {
		t.Fatalf("train on the CPU: %s", lastLine(cpuLog))
	}
	gpuPeaks, cpuPeaks := stepPeaks(log), stepPeaks(cpuLog)
	if len(gpuPeaks) != 3 || !reflect.DeepEqual(gpuPeaks, cpuPeaks) {
		t.Errorf("device peaks by step: %v on the GPU, %v on the CPU; want each step's own, the same", gpuPeaks, cpuPeaks)
	}
	for _, f := range []string{"actor/model.safetensors", "reward/model.safetensors", "ppo/actor/model.safetensors", "ppo/critic/model.safetensors", "ppo/actor_ema/model.safetensors"} {
		a, err1 := os.ReadFile(filepath.Join(gpuOut, f))
		b, err2 := os.ReadFile(filepath.Join(cpuOut, f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the runs (%v, %v)", f, err1, err2)
		}
	}
}

// stepPeaks is each step's logged device peak.
func stepPeaks(log string) map[string]int64 {
	peaks := map[string]int64{}
	for _, rec := range logLines(log) {
		if msg, _ := rec["message"].(string); strings.HasPrefix(msg, "memory: device peak") {
			step, _ := rec["step"].(string)
			p, _ := rec["device_peak_bytes"].(float64)
			peaks[step] = int64(p)
		}
	}
	return peaks
}

// TestTrainStepDevice: which device gochat train's communicator and steps
// use, and what a step leaves on it. On a GPU the steps take the device
// train opened and joined the ranks with; on the CPU each step opens its
// own (nil: as a lone command). A step on the shared GPU starts with its
// peak restarted and ends with everything it allocated freed, the
// buffers from before it (the communicator's) kept; a lone step closes
// the GPU it opened.
func TestTrainStepDevice(t *testing.T) {
	g := &Globals{Device: "cuda", Threads: 1, Log: zerolog.Nop()}
	c, err := newCPU(g)
	if err != nil {
		t.Fatal(err)
	}
	if d := trainStepDevice(c); d != nil {
		t.Errorf("on the CPU the steps share %v, want a device each", d)
	}
	standIn := gpuStandIn{c}
	if d := trainStepDevice(standIn); d != kernels.Device(standIn) {
		t.Errorf("a GPU without step scopes: the steps get %v", d)
	}

	board := &gpuBoard{total: 1 << 30}
	g.OpenGPU = board.open
	dev, err := newDevice(g)
	if err != nil {
		t.Fatal(err)
	}
	if d := trainStepDevice(dev); d != dev {
		t.Fatalf("on a GPU the steps get %v, want train's device %v", d, dev)
	}
	commBuf, err := dev.Alloc(kernels.F32, 1) // the communicator's (NCCL's Barrier buffer)
	if err != nil {
		t.Fatal(err)
	}
	big, _ := dev.Alloc(kernels.F32, 1<<20)
	dev.Free(big) // an earlier step's peak
	for step := range 3 {
		sd, end, err := stepDevice(g, trainStepDevice(dev), stepName(step+1))
		if err != nil || sd != dev {
			t.Fatalf("step %d: device %v, %v; want train's", step+1, sd, err)
		}
		if p := sd.MemStats().Peak; p != 4 {
			t.Errorf("step %d starts with peak %d, want the live 4 bytes", step+1, p)
		}
		model, _ := sd.Alloc(kernels.F32, 1000*(step+1)) // left allocated, as a step's models are
		tmp, _ := sd.Alloc(kernels.BF16, 500)
		sd.Free(tmp)
		if err := end(errStopped); err != errStopped {
			t.Errorf("end changed the step's error to %v", err)
		}
		_ = model
		if board.used != 4 || sd.MemStats().Live != 4 {
			t.Errorf("after step %d the GPU holds %d bytes (device live %d), want the communicator's 4", step+1, board.used, sd.MemStats().Live)
		}
	}
	if len(board.opened) != 1 {
		t.Errorf("%d devices opened, want 1", len(board.opened))
	}
	dev.Free(commBuf)

	// A lone step (gochat sft on a GPU) opens the device and closes it.
	sd, end, err := stepDevice(g, nil, stepName(1))
	if err != nil || sd == dev {
		t.Fatalf("lone step: %v, %v", sd, err)
	}
	if _, err := sd.Alloc(kernels.F32, 1000); err != nil {
		t.Fatal(err)
	}
	if err := end(nil); err != nil {
		t.Fatal(err)
	}
	if b := sd.(*boardGPU); !b.closed || board.used != 0 {
		t.Errorf("after a lone step: closed %v, the GPU holds %d bytes", b.closed, board.used)
	}
}

// TestTrainDemoGPUFreesAll: the demo recipe's generator (which makes the
// from-scratch models before step 1) and report (which evaluates the
// models after step 3) open devices of their own; on a GPU they close
// them, so that the steps' pre-flights find the GPU as free as the job's
// did and the job ends holding nothing.
func TestTrainDemoGPUFreesAll(t *testing.T) {
	dir := t.TempDir()
	recipe := filepath.Join(dir, "demo-short.yaml")
	os.WriteFile(recipe, []byte(`description: the demo, shortened
generator: demo
actor: "{demo}/base"
reward: "{output}/actor"
steps:
  sft: {data: ["{demo}/data/sft"], data-split: "1,0,0", max-seq-len: 40, per-device-train-batch-size: 32, max-steps: 2, add-eot-token: true, data-cache: "off"}
  reward: {data: ["{demo}/data/pairs"], data-split: "0,1,0", max-seq-len: 40, per-device-train-batch-size: 32, max-steps: 2, data-cache: "off"}
  ppo: {critic: "{output}/actor", reward: "{output}/reward", data: ["{demo}/data/prompts"], data-split: "0,0,1", max-prompt-seq-len: 40, max-answer-seq-len: 6, per-device-generation-batch-size: 16, per-device-training-batch-size: 16, max-steps: 1, num-warmup-steps: 0, data-cache: "off"}
`), 0o644)
	board := &gpuBoard{total: 80 << 30}
	g, stderr := board.globals()
	out := filepath.Join(dir, "out")
	if code := execute(g, []string{"--device", "cuda", "--log-format", "json", "train", "--recipe", recipe, "--dtype", "fp32", "--output-dir", out}); code != 0 {
		t.Fatalf("exit %d: %s", code, lastLine(stderr.String()))
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err != nil {
		t.Fatal(err)
	}
	var free []int64
	for _, rec := range logLines(stderr.String()) {
		if f, ok := rec["gpu_free_bytes"].(float64); ok {
			free = append(free, int64(f))
		}
	}
	if len(free) != 4 || free[1] != free[0] || free[2] != free[0] || free[3] != free[0] {
		t.Errorf("the GPU's free bytes at the job's and the steps' pre-flights: %v, want all the same", free)
	}
	if board.used != 0 {
		t.Errorf("after the job the GPU holds %d bytes", board.used)
	}
	for i, d := range board.opened {
		if !d.closed {
			t.Errorf("device %d of %d was not closed", i+1, len(board.opened))
		}
	}
}
