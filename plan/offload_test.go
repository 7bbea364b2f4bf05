package plan

import (
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
)

// TestOffloadEstimate: with ZeRO-Offload the planner moves the offloaded
// fraction of the optimizer state (moments, masters' low halves) and the
// host copies of those parameters and gradients from the device to the
// host: opt-125m's n parameters, per rank on 2 GPUs at ZeRO-1 (each rank
// updates n/2) and on one CPU process.
func TestOffloadEstimate(t *testing.T) {
	n := int64(model.ParamCount(preset(t, "opt-125m"), false))
	for _, tc := range []struct {
		name    string
		dt      kernels.DType
		par     Parallel
		moments int64 // on the device
		master  int64
		host    int64
		gpu     bool
	}{
		// fp32, 2 ranks: moments 8n/2; host: moments + (n/2)·(4 + 4).
		{"fp32 zero-1 all", kernels.F32, Parallel{Ranks: 2, Stage: 1, Offload: true}, 0, 0, 4*n + 4*n, true},
		{"fp32 zero-1 half", kernels.F32, Parallel{Ranks: 2, Stage: 1, Offload: true, OffloadRatio: 0.5}, 2 * n, 0, 2*n + 2*n, true},
		// bf16, 2 ranks: moments 4n, low halves n (n even); host copies
		// (n/2)·(2 + 4).
		{"bf16 zero-1 all", kernels.BF16, Parallel{Ranks: 2, Stage: 1, Offload: true}, 0, 0, 4*n + n + 3*n, true},
		{"bf16 zero-0 quarter", kernels.BF16, Parallel{Ranks: 2, Offload: true, OffloadRatio: 0.25}, 6 * n, 3 * n / 2, 2*n + n/2 + 3*n/2, true},
		// one CPU process: the host is the device's memory.
		{"fp32 cpu all", kernels.F32, Parallel{Offload: true}, 0, 0, 8*n + 8*n, false},
		{"fp32 none", kernels.F32, Parallel{Ranks: 2, Stage: 1}, 4 * n, 0, 0, true},
	} {
		s := stage125m(t)
		s.DType, s.Parallel = tc.dt, tc.par
		e := must(s.Estimate())
		m := e.Models[0]
		if m.Moments != tc.moments || m.Master != tc.master || m.Host != tc.host || e.Host != tc.host {
			t.Errorf("%s: device moments %d, master %d, host %d (estimate %d); want %d, %d, %d",
				tc.name, m.Moments, m.Master, m.Host, e.Host, tc.moments, tc.master, tc.host)
		}
		if tc.gpu {
			if e.HostPeak != tc.host+Runtime || e.Peak != e.Device+GPUReserve {
				t.Errorf("%s: host peak %d, peak %d; want %d and the device's %d", tc.name, e.HostPeak, e.Peak, tc.host+Runtime, e.Device+GPUReserve)
			}
		} else if e.Peak != e.Device+e.Host+e.Runtime+e.Headroom {
			t.Errorf("%s: on the CPU the peak %d does not include the host's %d", tc.name, e.Peak, e.Host)
		}
	}
	// On the CPU offload costs the host copies and saves nothing.
	s := stage125m(t)
	none := must(s.Estimate())
	s.Parallel = Parallel{Offload: true}
	if d := must(s.Estimate()).Peak - none.Peak; d != 8*n {
		t.Errorf("CPU offload changes the peak by %d, want the host copies' %d", d, 8*n)
	}
}

// TestFitProposesOffload: a GPU run whose optimizer state does not fit
// is offered --offload at the smallest ratio that fits; a CPU run never.
func TestFitProposesOffload(t *testing.T) {
	s := stage125m(t)
	s.Sft.Checkpoint = true // the milder change is taken already
	s.Parallel = Parallel{Ranks: 2}
	e := must(s.Estimate())
	m := e.Models[0]
	budget := e.Peak - m.Moments/3 // a quarter offloaded is not enough, half is
	var flags []string
	for _, c := range s.Fit(Budget{GPU: budget, Host: 1 << 50}) {
		flags = append(flags, strings.Join(c.Flags, " "))
	}
	if !strings.Contains(strings.Join(flags, "|"), "--offload --offload-ratio 0.5") {
		t.Errorf("changes %q: want --offload --offload-ratio 0.5 among them", flags)
	}
	s.Parallel = Parallel{}
	for _, c := range s.Fit(Budget{Host: must(s.Estimate()).Peak - m.Moments/3}) {
		if strings.Contains(strings.Join(c.Flags, " "), "offload") {
			t.Errorf("a CPU run is offered %v", c.Flags)
		}
	}
}
