package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// opt-125m's layout from its config (V 50272, H 768, F 3072, 12 layers,
// 2048+2 learned positions, tied LM head): in front of the layers the
// token and position embeddings and the final norm, V·H + 2050·H + 2H; a
// layer the attention (4H² + 4H), the MLP (2HF + F + H) and two norms
// (4H); behind the layers the value head (P = H) when there is one.
const (
	h125     = 768
	front125 = 50272*h125 + 2050*h125 + 2*h125
	layer125 = 4*h125*h125 + 4*h125 + 2*h125*3072 + 3072 + h125 + 4*h125
	n125     = front125 + 12*layer125
	// LoRA of rank 8 on every linear layer (lora.DefaultModules): q, k, v,
	// out (H+H)·8 each, fc1 and fc2 (H+F)·8 each, in 12 layers.
	lora125 = 12 * 8 * (4*2*h125 + 2*(h125+3072))
)

// TestUnits: model.Units is train.ModelUnits from the config alone, and
// opt-125m's are the formulas above.
func TestUnits(t *testing.T) {
	c := preset(t, "opt-125m")
	for _, vh := range []bool{false, true} {
		u := model.Units(c, vh)
		back := 0
		if vh {
			back = h125
		}
		if len(u) != 14 || u[0] != front125 || u[1] != layer125 || u[12] != layer125 || u[13] != back {
			t.Errorf("opt-125m units (value head %v): %v; want %d, 12×%d, %d", vh, u, front125, layer125, back)
		}
	}
	if n := model.ParamCount(c, false); n != n125 {
		t.Fatalf("opt-125m has %d parameters, the formulas %d", n, n125)
	}
	if lp, _, _ := lora.Size(c, lora.Config{Dim: 8}); lp != lora125 {
		t.Fatalf("opt-125m LoRA rank 8: %d parameters, the formula %d", lp, lora125)
	}
	// A small model built on the CPU: the same units as the offload uses.
	small := *c
	small.VocabSize, small.HiddenSize, small.WordEmbedProjDim, small.FFNDim, small.NumLayers, small.NumHeads, small.MaxPositions = 64, 16, 8, 32, 3, 2, 16
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, vh := range []bool{false, true} {
		m, err := model.New(dev, &small, model.Options{ValueHead: vh})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := model.Units(&small, vh), train.ModelUnits(m); !equalInts(got, want) {
			t.Errorf("value head %v: model.Units %v, train.ModelUnits %v", vh, got, want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGPUHostSplit: on a GPU the estimate keeps the device's and the
// host's memory apart, with and without ZeRO-Offload (the LoRA adapters'
// state included), byte for byte from the formulas: fp32 AdamW holds 8
// bytes of moments a parameter, bf16 adds 2 of master low halves; an
// offloaded element costs the host its state plus copies of the parameter
// (its type) and the gradient (4).
func TestGPUHostSplit(t *testing.T) {
	const n, lp = int64(n125), int64(lora125)
	for _, tc := range []struct {
		name                  string
		reward                bool
		dt                    kernels.DType
		lora                  int
		onlyLoRA              bool
		par                   Parallel
		moments, master, host int64 // the model's, device and host
		loraMoved             int64 // LoRA bytes that leave the device (its moments)
	}{
		{"fp32", false, kernels.F32, 0, false, Parallel{GPU: true}, 8 * n, 0, 0, 0},
		{"bf16", false, kernels.BF16, 0, false, Parallel{GPU: true}, 8 * n, 2 * n, 0, 0},
		{"fp32 offload", false, kernels.F32, 0, false, Parallel{GPU: true, Offload: true}, 0, 0, 8*n + 8*n, 0},
		{"bf16 offload", false, kernels.BF16, 0, false, Parallel{GPU: true, Offload: true}, 0, 0, 10*n + 6*n, 0},
		{"fp32 offload half", false, kernels.F32, 0, false, Parallel{GPU: true, Offload: true, OffloadRatio: 0.5}, 4 * n, 0, 8 * n, 0},
		// Only the adapters are optimized: their state moves to the host.
		{"lora only", false, kernels.BF16, 8, true, Parallel{GPU: true}, 0, 0, 0, 0},
		{"lora only offload", false, kernels.BF16, 8, true, Parallel{GPU: true, Offload: true}, 0, 0, 16 * lp, 8 * lp},
		// Step 2: the value head (P = H elements, fp32 state even in bf16:
		// its moments and master halves) first, then the adapters.
		{"reward lora only offload", true, kernels.BF16, 8, true, Parallel{GPU: true, Offload: true}, 0, 0, h125*16 + 16*lp, 8 * lp},
		// Full training with adapters, half offloaded: the first half of
		// the model's elements in flat order, none of the adapters'.
		{"fp32 lora offload half", false, kernels.F32, 8, false, Parallel{GPU: true, Offload: true, OffloadRatio: 0.5}, 8*n - 8*((n+lp)/2), 0, 16 * ((n + lp) / 2), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stage125m(t)
			s.Reward, s.DType, s.Parallel = tc.reward, tc.dt, tc.par
			if tc.lora > 0 {
				s.LoRA, s.OnlyLoRA = lora.Config{Dim: tc.lora}, tc.onlyLoRA
			}
			e := must(s.Estimate())
			m := e.Models[0]
			if m.Moments != tc.moments || m.Master != tc.master || m.Host != tc.host || e.Host != tc.host {
				t.Errorf("device moments %d, master %d, host %d; want %d, %d, %d", m.Moments, m.Master, m.Host, tc.moments, tc.master, tc.host)
			}
			if tc.lora > 0 {
				on := s
				on.Parallel.Offload = false
				if got := must(on.Estimate()).Models[0].LoRA - m.LoRA; got != tc.loraMoved {
					t.Errorf("LoRA: %d bytes leave the device, want %d", got, tc.loraMoved)
				}
			}
			if !e.GPU || e.Peak != e.Device+GPUReserve || e.HostPeak != tc.host+Runtime || e.Headroom != 0 {
				t.Errorf("GPU estimate: peak %d (device %d), host peak %d; want device + %d, host %d + %d", e.Peak, e.Device, e.HostPeak, GPUReserve, tc.host, Runtime)
			}
			// The same settings on the CPU: one memory, holding both.
			s.Parallel.GPU = false
			c := must(s.Estimate())
			if c.GPU || c.HostPeak != 0 || c.Peak != c.Device+c.Host+Runtime+c.Headroom || c.Host != tc.host {
				t.Errorf("CPU estimate: %+v", c)
			}
		})
	}
}

// TestOffloadLargeModel: the offloaded share of opt-1.3b's state (its
// byte counts times element counts overflow int64) is exact.
func TestOffloadLargeModel(t *testing.T) {
	s := stage125m(t)
	s.Model = preset(t, "opt-1.3b")
	n := int64(model.ParamCount(s.Model, false))
	for _, r := range []float64{1, 0.5} {
		s.Parallel = Parallel{GPU: true, Offload: true, OffloadRatio: r}
		m := must(s.Estimate()).Models[0]
		k := int64(math.Round(r*float64(n)/2)) * 2
		if m.Host != 16*k || m.Moments != 8*(n-k) {
			t.Errorf("ratio %v: host %d, device moments %d; want %d, %d", r, m.Host, m.Moments, 16*k, 8*(n-k))
		}
	}
}

// TestFrozenOffloadEstimate: --offload-reference-model and
// --offload-reward-model move a frozen model's weights to the host and
// leave on the device what a pass brings at once: the parts in front of
// and behind the layers, and one layer. Loading holds the model whole
// (it is loaded and offloaded before the others). A device that cannot
// return memory keeps the weights too.
func TestFrozenOffloadEstimate(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		sz := int64(dt.Size())
		p := ppo125m(t)
		p.DType, p.Parallel = dt, Parallel{GPU: true}
		base := must(p.Estimate())
		p.OffloadRef, p.OffloadReward = true, true
		e := must(p.Estimate())
		ref, rm := e.Models[1], e.Models[3]
		if want := int64(front125+layer125) * sz; ref.Weights != want || ref.Host != n125*sz || !ref.FrozenOffload {
			t.Errorf("%v reference: device %d, host %d; want %d, %d", dt, ref.Weights, ref.Host, want, n125*sz)
		}
		if want := int64(front125+layer125+h125) * sz; rm.Weights != want || rm.Host != (n125+h125)*sz {
			t.Errorf("%v reward model: device %d, host %d; want %d, %d", dt, rm.Weights, rm.Host, want, (n125+h125)*sz)
		}
		saved := base.Models[1].Weights - ref.Weights + base.Models[3].Weights - rm.Weights
		for i, ph := range e.Phases {
			if ph.Name == "load" {
				continue
			}
			if d := base.Phases[i].Bytes - ph.Bytes; d != saved {
				t.Errorf("%v %s phase: %d bytes less, want %d", dt, ph.Name, d, saved)
			}
		}
		if e.Host != ref.Host+rm.Host || e.HostPeak != e.Host+Runtime {
			t.Errorf("%v host: %d (peak %d)", dt, e.Host, e.HostPeak)
		}
		// Without released memory: whole on the device and on the host.
		p.NoRelease = true
		k := must(p.Estimate())
		if k.Models[1].Weights != base.Models[1].Weights || k.Models[1].Host != n125*sz || k.Device != base.Device {
			t.Errorf("%v without release: %+v, device %d (want %d)", dt, k.Models[1], k.Device, base.Device)
		}
	}
}

// TestFitGPUAndHost: on a GPU the changes Fit proposes fit both memories:
// offload is proposed when the host can take the state, not when it
// cannot; frozen offload for step 3 on a GPU only; ZeRO stages with the
// ranks at hand.
func TestFitGPUAndHost(t *testing.T) {
	s := stage125m(t)
	s.Sft.Checkpoint = true
	s.Parallel = Parallel{GPU: true}
	e := must(s.Estimate())
	gpu := e.Peak - e.Models[0].Moments/3 // half the state offloaded fits, a quarter not
	flags := func(cs []Change) string {
		var out []string
		for _, c := range cs {
			out = append(out, strings.Join(c.Flags, " "))
		}
		return strings.Join(out, "|")
	}
	check := func(name string, in Stage, b Budget, cs []Change) {
		t.Helper()
		for _, c := range cs {
			if c.Peak > b.GPU || c.HostPeak > b.Host || !c.GPU {
				t.Errorf("%s: %v does not fit %+v", name, c, b)
			}
		}
	}
	roomy := Budget{GPU: gpu, Host: 64 << 30}
	got := s.Fit(roomy)
	check("roomy host", s, roomy, got)
	if !strings.Contains(flags(got), "--offload --offload-ratio 0.5") {
		t.Errorf("roomy host: %s; want --offload --offload-ratio 0.5", flags(got))
	}
	tight := Budget{GPU: gpu, Host: Runtime + 1<<20} // no room for offloaded state
	got = s.Fit(tight)
	check("tight host", s, tight, got)
	if len(got) == 0 || strings.Contains(flags(got), "offload") {
		t.Errorf("tight host: %s; want changes without offload", flags(got))
	}
	if got := s.Fit(Budget{GPU: gpu, Host: Runtime - 1}); got != nil {
		t.Errorf("a host that cannot hold the runtime: %s, want nothing", flags(got))
	}

	// ZeRO over 4 ranks: the optimizer state partitioned (stage 1) fits.
	z := stage125m(t)
	z.Sft.Checkpoint = true
	z.Parallel = Parallel{GPU: true, Ranks: 4, Gochat: true}
	ze := must(z.Estimate())
	zb := Budget{GPU: ze.Peak - ze.Models[0].Moments/2, Host: 64 << 30}
	if f := flags(z.Fit(zb)); !strings.Contains(f, "--zero-stage 1") {
		t.Errorf("4 ranks: %s; want --zero-stage 1", f)
	}
	z.Parallel.Ranks = 1
	if f := flags(z.Fit(zb)); strings.Contains(f, "zero-stage") {
		t.Errorf("1 rank: %s proposes ZeRO", f)
	}

	// Step 3: the reference model's weights on the host fit a GPU budget
	// that is short of them.
	p := ppo125m(t)
	p.ActorCheckpointing, p.Opts.CriticCheckpointing = true, true
	p.Parallel = Parallel{GPU: true}
	pe := must(p.Estimate())
	pb := Budget{GPU: pe.Peak - pe.Models[1].Weights/2, Host: 64 << 30}
	if f := flags(p.Fit(pb)); !strings.Contains(f, "--offload-reference-model") || !strings.Contains(f, "--offload-reward-model") {
		t.Errorf("step 3 on a GPU: %s; want the frozen models offloaded", f)
	}
	p.NoRelease = true
	if f := flags(p.Fit(pb)); strings.Contains(f, "reference-model") {
		t.Errorf("a GPU that keeps released memory: %s", f)
	}
	p.NoRelease, p.Parallel.GPU = false, false
	if f := flags(p.Fit(Budget{Host: pe.Device - pe.Models[1].Weights/2})); strings.Contains(f, "model") && strings.Contains(f, "offload-re") {
		t.Errorf("step 3 on the CPU: %s", f)
	}
}
