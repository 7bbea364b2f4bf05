package model

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/tensor"
)

// The golden files under testdata/golden are written by
// scripts/gen_model_golden.py: a float64 PyTorch port of transformers'
// OPT forward, from the same float32 weights. Errors are measured per tensor
// as max|got−want| / max|want| (relative to the tensor's scale, so entries
// near zero do not dominate).

func newCPU(t testing.TB, threads int) *cpu.Device {
	t.Helper()
	d, err := cpu.New(cpu.Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// goldenFile holds the tensors of one golden dump.
type goldenFile struct {
	t  testing.TB
	ck *tensor.Checkpoint
}

func openGolden(t testing.TB, path string) *goldenFile {
	t.Helper()
	ck, err := tensor.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return &goldenFile{t, ck}
}

func (g *goldenFile) has(name string) bool { _, ok := g.ck.Info(name); return ok }

func (g *goldenFile) f32(name string) []float32 {
	g.t.Helper()
	info, ok := g.ck.Info(name)
	if !ok {
		g.t.Fatalf("golden tensor %q missing", name)
	}
	n := 1
	for _, d := range info.Shape {
		n *= d
	}
	out := make([]float32, n)
	if err := g.ck.ReadF32(name, out); err != nil {
		g.t.Fatal(err)
	}
	return out
}

func (g *goldenFile) i32(name string) ([]int32, []int) {
	g.t.Helper()
	v, err := g.ck.ReadI64(name)
	if err != nil {
		g.t.Fatal(err)
	}
	info, _ := g.ck.Info(name)
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out, info.Shape
}

// relErr is max|got−want| / max(max|want|, floor).
func relErr(got, want []float32, floor float64) (float64, int) {
	var maxDiff, maxRef float64
	worst := -1
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > maxDiff || math.IsNaN(d) {
			maxDiff, worst = d, i
		}
		maxRef = math.Max(maxRef, math.Abs(float64(want[i])))
	}
	if len(got) != len(want) {
		return math.Inf(1), -1
	}
	return maxDiff / math.Max(maxRef, floor), worst
}

func checkClose(t *testing.T, what string, got, want []float32, tol, floor float64) {
	t.Helper()
	e, i := relErr(got, want, floor)
	if e > tol || math.IsNaN(e) {
		if i >= 0 && i < len(got) {
			t.Errorf("%s: relative error %.3g > %.1g (first worst at %d: got %v, want %v)", what, e, tol, i, got[i], want[i])
		} else {
			t.Errorf("%s: relative error %.3g > %.1g (len %d vs %d)", what, e, tol, len(got), len(want))
		}
	}
}

// goldenTol are the bounds of the golden comparisons. cpuTol holds on
// kernels/cpu (and is what the CPU tests have always used); deviceTol holds
// on another backend (GOCHAT_TEST_DEVICE, device_test.go), whose sums run in
// another order (cuBLAS's GEMM tiling and split-K, tree reductions in the
// norm, softmax and loss kernels, the device's exp and log): in fp32 each
// of those moves a result by a few ulps, so ten times the CPU's bounds keeps
// a margin of about a hundred over what they cost on a model this small,
// while a wrong kernel is off by 1e-2 or more; in bf16 a different fp32
// partial sum can round a bf16-stored activation the other way (one bf16
// ulp, 2^-8), so the bf16 bounds get slack of that order.
type goldenTol struct {
	// fp32 multiplies the fp32 bounds against PyTorch's float64: logits,
	// loss and values 1e-5, gradients 1e-4, the AdamW loss trajectory 1e-5
	// (all relative to the largest |want|; gradients floored at 1e-3 of the
	// largest gradient of the model).
	fp32 float64
	// bf16Logits multiplies the bound of bf16 logits against torch
	// autocast's (OPT 2e-2, LLaMA 3e-2, relative, floor 1).
	bf16Logits float64
	// The bf16 error against the exact answer may be at most
	// bf16Ratio·PyTorch's + bf16Abs (logits, max relative) and
	// bf16GradRatio·PyTorch's + bf16GradAbs (gradients, relative L2).
	bf16Ratio, bf16Abs         float64
	bf16GradRatio, bf16GradAbs float64
	// bf16Loss bounds the relative difference from autocast's loss.
	bf16Loss float64
}

var (
	cpuTol    = goldenTol{fp32: 1, bf16Logits: 1, bf16Ratio: 1.5, bf16Abs: 1e-3, bf16GradRatio: 2, bf16GradAbs: 0.05, bf16Loss: 1e-2}
	deviceTol = goldenTol{fp32: 10, bf16Logits: 1.5, bf16Ratio: 2, bf16Abs: 2e-3, bf16GradRatio: 2, bf16GradAbs: 0.05, bf16Loss: 2e-2}
)

func TestGoldenPyTorch(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		for _, side := range []string{"left", "right"} {
			t.Run(name+"/"+side, func(t *testing.T) { checkOPTGolden(t, newCPU(t, 2), name, side, cpuTol) })
		}
	}
}

// checkOPTGolden loads the tiny OPT testdata/golden/name on dev and checks
// its logits, loss, values and every gradient (with and without gradient
// checkpointing) on the batch of side.safetensors, then ten AdamW steps.
func checkOPTGolden(t *testing.T, dev kernels.Device, name, side string, tol goldenTol) {
	dir := filepath.Join("testdata", "golden", name)
	m, err := Load(dev, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := openGolden(t, filepath.Join(dir, side+".safetensors"))
	ids, shape := g.i32("ids")
	mask, _ := g.i32("mask")
	targets, _ := g.i32("targets")
	B, T := shape[0], shape[1]
	batch := Batch{IDs: ids, Mask: mask, Targets: targets}

	for _, ckpt := range []bool{false, true} {
		a := goldenForwardBackward(t, m, g, batch, B, T, ckpt, tol)
		checkGrads(t, m, g, fmt.Sprintf("checkpoint=%v", ckpt), tol)
		a.Free()
	}
	checkAdamW(t, m, g, batch, B, T, tol)
}

// goldenForwardBackward runs m's forward pass on batch (B×T, gradient
// checkpointing as ckpt), checks the logits, the loss and the values (if
// the golden has them) against g, and runs the backward pass of the mean
// loss (and of the golden's value gradient) into freshly zeroed
// gradients. It returns the activations for the caller to free.
func goldenForwardBackward(t *testing.T, m *Model, g *goldenFile, batch Batch, B, T int, ckpt bool, tol goldenTol) *Acts {
	t.Helper()
	a := must(m.NewActs(B, T, ActsOptions{Train: true, Checkpoint: ckpt}))
	if err := m.Forward(a, batch); err != nil {
		t.Fatal(err)
	}
	logits, _ := m.Logits(a)
	checkClose(t, "logits", logits, g.f32("logits"), 1e-5*tol.fp32, 0)
	loss, _, _ := m.MeanLoss(a)
	checkClose(t, "loss", []float32{loss}, g.f32("loss"), 1e-5*tol.fp32, 0)
	grad := m.MeanLossGrad(a)
	if g.has("values") {
		v, _ := m.Values(a)
		checkClose(t, "values", v, g.f32("values"), 1e-5*tol.fp32, 0)
		grad.DValues = g.f32("dvalues")
	}
	goldenBackward(t, m, a, grad)
	return a
}

// goldenBackward runs m's backward pass of grad over the activations a
// into freshly zeroed gradients.
func goldenBackward(t *testing.T, m *Model, a *Acts, grad Grad) {
	t.Helper()
	if err := m.AllocGrads(); err != nil {
		t.Fatal(err)
	}
	m.ZeroGrads()
	if err := m.Backward(a, grad); err != nil {
		t.Fatal(err)
	}
}

// checkGrads compares every parameter gradient. k_proj.bias has an
// identically zero true gradient (softmax is invariant to a per-row shift of
// the scores): gochat writes exact zeros, PyTorch rounding noise, so errors
// are measured against a floor of 1e-3 of the largest gradient in the model
// rather than against that tensor's own scale.
func checkGrads(t *testing.T, m *Model, g *goldenFile, what string, tol goldenTol) {
	t.Helper()
	global := goldenGradMax(m, g)
	for _, name := range m.ParamNames() {
		view, err := m.ParamView(m.Grads, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, view.Len())
		m.Dev.ReadF32(got, view)
		if strings.HasSuffix(name, "k_proj.bias") && slices.ContainsFunc(got, func(x float32) bool { return x != 0 }) {
			t.Errorf("%s grad %s is not exactly zero: %v", what, name, got)
		}
		checkClose(t, what+" grad "+name, got, g.f32("grad."+name), 1e-4*tol.fp32, 1e-3*global)
	}
}

// checkAdamW runs ten AdamW steps on the mean loss from the loaded weights.
func checkAdamW(t *testing.T, m *Model, g *goldenFile, batch Batch, B, T int, tol goldenTol) {
	t.Helper()
	d := m.Dev
	n := m.NumParams()
	mom, vel := must(d.Alloc(kernels.F32, n)), must(d.Alloc(kernels.F32, n))
	a := must(m.NewActs(B, T, ActsOptions{Train: true}))
	want := g.f32("adamw_losses")
	got := make([]float32, len(want))
	for step := 1; step <= len(want); step++ {
		if err := m.Forward(a, batch); err != nil {
			t.Fatal(err)
		}
		got[step-1], _, _ = m.MeanLoss(a)
		m.ZeroGrads()
		if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
			t.Fatal(err)
		}
		d.AdamWStep(m.Params.Flat, m.Grads.Flat, mom, vel, n, 1e-3, 0.9, 0.95, 1e-8, 0.01, 1, step)
	}
	for i := range want {
		checkClose(t, fmt.Sprintf("AdamW loss at step %d", i+1), got[i:i+1], want[i:i+1], 1e-5*tol.fp32, 0)
	}
}

// goldenGradMax is the largest |gradient| PyTorch wrote for any of m's
// parameters: the floor of the gradient comparisons.
func goldenGradMax(m *Model, g *goldenFile) float64 {
	most := 0.0
	for _, name := range m.ParamNames() {
		for _, x := range g.f32("grad." + name) {
			most = math.Max(most, math.Abs(float64(x)))
		}
	}
	return most
}
