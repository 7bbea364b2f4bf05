package model

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/tensor"
)

// TestBF16MatchesPyTorchAutocast runs the tiny pre-LN and post-LN OPTs with
// bf16 parameters against testdata/golden/*/bf16.safetensors
// (scripts/gen_bf16_golden.py): PyTorch's forward under
// torch.autocast(bfloat16) on the same bf16-rounded weights, and the exact
// (float64) forward of those weights. Two checks:
//   - gochat's logits and loss are within bf16 tolerance of PyTorch's;
//   - gochat's error against the exact answer is no larger than about
//     PyTorch's own (gochat keeps matmul outputs in fp32, PyTorch rounds them
//     to bf16, so gochat is usually closer).
//
// Both the native path (AVX512_BF16 where the CPU has it) and the portable
// one (convert while packing) are checked.
func TestBF16MatchesPyTorchAutocast(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		for _, isa := range []string{"", "generic"} {
			t.Run(name+"/"+cmpOr(isa, "best"), func(t *testing.T) {
				dev, err := cpu.New(cpu.Options{Threads: 2, ISA: isa})
				if err != nil {
					t.Fatal(err)
				}
				checkOPTBF16(t, dev, name, cpuTol)
			})
		}
	}
}

// bf16GoldenForward loads the golden case in dir with bf16 weights on dev
// (checking that they are bf16), opens its bf16.safetensors and runs the
// forward pass on its batch (with training activations when train is set).
func bf16GoldenForward(t *testing.T, dev kernels.Device, dir string, train bool) (*Model, *goldenFile, *Acts) {
	t.Helper()
	m, err := Load(dev, dir, LoadOptions{DType: kernels.BF16})
	if err != nil {
		t.Fatal(err)
	}
	if m.Params.Flat.DType() != kernels.BF16 {
		t.Fatalf("parameters are %v, want bf16", m.Params.Flat.DType())
	}
	g := openGolden(t, filepath.Join(dir, "bf16.safetensors"))
	ids, shape := g.i32("ids")
	mask, _ := g.i32("mask")
	targets, _ := g.i32("targets")
	a := must(m.NewActs(shape[0], shape[1], ActsOptions{Train: train}))
	if err := m.Forward(a, Batch{IDs: ids, Mask: mask, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	return m, g, a
}

// checkOPTBF16 is TestBF16MatchesPyTorchAutocast's check of the OPT case
// name on dev.
func checkOPTBF16(t *testing.T, dev kernels.Device, name string, tol goldenTol) {
	m, g, a := bf16GoldenForward(t, dev, filepath.Join("testdata", "golden", name), false)
	// bf16 has 8 significant bits: 2^-8 relative per rounding.
	checkBF16LogitsLoss(t, m, g, a, 2e-2*tol.bf16Logits, tol)
}

// checkBF16LogitsLoss checks the logits and loss of a bf16 forward pass a
// against PyTorch autocast's (logits within bound, relative to the largest),
// and the logits' error against the exact answer against autocast's own.
func checkBF16LogitsLoss(t *testing.T, m *Model, g *goldenFile, a *Acts, bound float64, tol goldenTol) {
	t.Helper()
	logits, err := m.Logits(a)
	if err != nil {
		t.Fatal(err)
	}
	loss, _, err := m.MeanLoss(a)
	if err != nil {
		t.Fatal(err)
	}
	torchBF16, exact := g.f32("logits_bf16"), g.f32("logits_exact")
	checkClose(t, "logits vs torch autocast", logits, torchBF16, bound, 1)
	ours, _ := relErr(logits, exact, 1)
	theirs, _ := relErr(torchBF16, exact, 1)
	t.Logf("max logit error vs exact: gochat bf16 %.3g, torch autocast %.3g (relative)", ours, theirs)
	if ours > tol.bf16Ratio*theirs+tol.bf16Abs {
		t.Errorf("gochat bf16 logit error %.3g exceeds %gx PyTorch's %.3g + %g", ours, tol.bf16Ratio, theirs, tol.bf16Abs)
	}
	if want := float64(g.f32("loss_bf16")[0]); math.Abs(float64(loss)-want) > tol.bf16Loss*math.Abs(want) {
		t.Errorf("loss %.6f, torch autocast %.6f (exact %.6f)", loss, want, g.f32("loss_exact")[0])
	}
}

// TestBF16Gradients checks the bf16 backward (bf16 matmuls into fp32
// gradients) on the batch of bf16.safetensors against the exact (float64)
// gradients of the same bf16 weights, next to PyTorch autocast's gradients
// (grad_bf16). The measure is the relative L2 error over all parameters:
// per-tensor maxima are not comparable on a 21-token ReLU model, where a
// pre-activation within bf16 rounding of zero flips its ReLU gate and moves
// one row of a gradient by its full size (which rows flip differs between
// PyTorch, which rounds matmul outputs to bf16, and gochat, which keeps
// them fp32). A wrong backward is off by about 100%.
func TestBF16Gradients(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		t.Run(name, func(t *testing.T) { checkOPTBF16Grads(t, newCPU(t, 2), name, cpuTol) })
	}
}

// checkOPTBF16Grads is TestBF16Gradients' check of the OPT case name on
// dev, with and without gradient checkpointing.
func checkOPTBF16Grads(t *testing.T, dev kernels.Device, name string, tol goldenTol) {
	dir := filepath.Join("testdata", "golden", name)
	m, err := Load(dev, dir, LoadOptions{DType: kernels.BF16})
	if err != nil {
		t.Fatal(err)
	}
	g := openGolden(t, filepath.Join(dir, "bf16.safetensors"))
	ids, shape := g.i32("ids")
	mask, _ := g.i32("mask")
	targets, _ := g.i32("targets")
	for _, ckpt := range []bool{false, true} {
		a := must(m.NewActs(shape[0], shape[1], ActsOptions{Train: true, Checkpoint: ckpt}))
		if err := m.Forward(a, Batch{IDs: ids, Mask: mask, Targets: targets}); err != nil {
			t.Fatal(err)
		}
		grad := m.MeanLossGrad(a)
		if g.has("dvalues") {
			grad.DValues = g.f32("dvalues")
		}
		goldenBackward(t, m, a, grad)
		if m.Grads.Flat.DType() != kernels.F32 {
			t.Fatalf("gradients are %v, want f32", m.Grads.Flat.DType())
		}
		ours, theirs := bf16GradErrors(m, g)
		t.Logf("checkpoint=%v: relative L2 gradient error vs exact: gochat bf16 %.3g, torch autocast %.3g", ckpt, ours, theirs)
		if ours > tol.bf16GradRatio*theirs+tol.bf16GradAbs {
			t.Errorf("checkpoint=%v: gradient error %.3g, PyTorch autocast's %.3g", ckpt, ours, theirs)
		}
	}
}

// TestBF16RoundTrip checks that a bf16 model saves bf16 tensors (config
// torch_dtype bfloat16) and loads back bit-identical.
func TestBF16RoundTrip(t *testing.T) {
	dev := newCPU(t, 2)
	dir := filepath.Join("testdata", "golden", "postln")
	m, err := Load(dev, dir, LoadOptions{DType: kernels.BF16})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := m.Save(out, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	ck, err := tensor.OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, n := range ck.Names() {
		if info, _ := ck.Info(n); info.DType != tensor.BF16 {
			t.Fatalf("%s saved as %s, want BF16", n, info.DType)
		}
	}
	cfg, err := LoadConfig(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TorchDtype != "bfloat16" {
		t.Errorf("torch_dtype %q, want bfloat16", cfg.TorchDtype)
	}
	back, err := Load(dev, out, LoadOptions{DType: kernels.BF16})
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.Params.Flat.(cpu.BF16), back.Params.Flat.(cpu.BF16)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("parameter %d: %#04x saved, %#04x loaded", i, a[i], b[i])
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// bf16GradErrors returns the relative L2 errors, against the exact
// gradients of the golden file (grad_exact.*), of m's gradients and of
// PyTorch autocast's bf16 ones (grad_bf16.*).
func bf16GradErrors(m *Model, g *goldenFile) (ours, theirs float64) {
	var norm2, ours2, theirs2 float64
	for _, n := range m.ParamNames() {
		view := must(m.ParamView(m.Grads, n))
		got := make([]float32, view.Len())
		m.Dev.ReadF32(got, view)
		exact, torch := g.f32("grad_exact."+n), g.f32("grad_bf16."+n)
		for i, x := range exact {
			norm2 += float64(x) * float64(x)
			ours2 += math.Pow(float64(got[i])-float64(x), 2)
			theirs2 += math.Pow(float64(torch[i])-float64(x), 2)
		}
	}
	return math.Sqrt(ours2 / norm2), math.Sqrt(theirs2 / norm2)
}
