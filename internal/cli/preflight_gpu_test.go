package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/plan"
)

// gpuWithMemory is a GPU stand-in (a CPU device underneath) whose driver
// reports free of total bytes: the pre-flight's GPU memory source.
type gpuWithMemory struct {
	gpuStandIn
	free, total int64
}

func (g gpuWithMemory) MemInfo() (free, total int64, err error) { return g.free, g.total, nil }

// runGPU runs gochat on a machine with a GPU that has free bytes free
// and host bytes of host memory available.
func runGPU(t *testing.T, free, host int64, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	g := &Globals{In: strings.NewReader(""), Out: &out, Err: &errb,
		Memory: func() (plan.Memory, error) {
			return plan.Memory{MemAvailable: host, CgroupFree: -1, Available: host}, nil
		},
		OpenGPU: func(g *Globals, n int) (kernels.Device, error) {
			c, err := newCPU(g)
			return gpuWithMemory{gpuStandIn{c}, free, 80 << 30}, err
		}}
	code = execute(g, append([]string{"--device", "cuda"}, args...))
	return out.String(), errb.String(), code
}

// TestPreflightGPU: with a GPU the pre-flight compares the device peak
// with the GPU's free memory and the host peak with the host's. Step 3 of
// opt-1.3b + opt-350m in fp32 does not fit a GPU with 20 GiB free (the
// host has plenty): refused before anything is loaded, naming the GPU and
// both memories; the changes are the planner's (gochat estimate --json on
// the same GPU gives them), each fits both, and the step run with one of
// them passes the pre-flight. With --offload on a host without room for
// the state, the host is what does not fit, and no offload would.
// --skip-preflight overrides.
func TestPreflightGPU(t *testing.T) {
	actor, critic := configDir(t, "opt-1.3b"), configDir(t, "opt-350m")
	out := filepath.Join(t.TempDir(), "ppo")
	flags := []string{"--actor", actor, "--critic", critic, "--dtype", "fp32", "--max-prompt-seq-len", "256",
		"--max-answer-seq-len", "256", "--per-device-generation-batch-size", "4", "--per-device-training-batch-size", "4"}
	run := append([]string{"--log-format", "json", "ppo", "--data", "x.jsonl", "--output-dir", out}, flags...)
	const free, host = int64(20 << 30), int64(256 << 30)

	_, errOut, code := runGPU(t, free, host, run...)
	msg := lastLine(errOut)
	if code != exitUsage {
		t.Fatalf("code %d: %s", code, msg)
	}

	for _, want := range []string{"step 3 (ppo) does not fit in GPU memory", "GPU cuda:7 (stand-in):", "20.0 GiB free of 80.0 GiB (does not fit)",
		"host: ", "(fits)", "Largest parts: actor optimizer moments", "--skip-preflight"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q: %s", want, msg)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the refused run created its output directory")
	}

	// The same plan through gochat estimate on the same GPU.
	js, errOut, code := runGPU(t, free, host, append([]string{"estimate", "ppo", "--json"}, flags...)...)
	if code != 0 {
		t.Fatalf("estimate: %s", errOut)
	}
	var res struct {
		Steps []struct {
			Fits     bool
			Estimate plan.Estimate
			Changes  []plan.Change
		}
		GPU struct{ Name string }
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	if len(res.Steps) != 1 || res.Steps[0].Fits || !res.Steps[0].Estimate.GPU || res.GPU.Name != "cuda:7 (stand-in)" || len(res.Steps[0].Changes) == 0 {
		t.Fatalf("estimate on the GPU: %s", js)
	}
	for _, c := range res.Steps[0].Changes {
		if !c.GPU || c.Peak > free || c.HostPeak > host {
			t.Errorf("change %v does not fit", c)
		}
		if !strings.Contains(msg, c.String()) {
			t.Errorf("the refusal lacks the planner's change %v: %s", c, msg)
		}
	}
	// A proposed change passes the pre-flight: the step goes on to load
	// (and fails there: the directories hold no weights).
	var fix []string
	for _, f := range res.Steps[0].Changes[0].Flags {
		fix = append(fix, strings.Fields(f)...)
	}
	_, errOut, _ = runGPU(t, free, host, append(run, fix...)...)
	if strings.Contains(errOut, "does not fit") {
		t.Errorf("with %v: %s", fix, lastLine(errOut))
	}

	// Offloading to a host without room: the host does not fit.
	sft := []string{"--log-format", "json", "sft", "--model", actor, "--data", "x.jsonl", "--output-dir", out, "--dtype", "fp32",
		"--max-seq-len", "128", "--per-device-train-batch-size", "1", "--offload"}
	_, errOut, code = runGPU(t, 60<<30, 4<<30, sft...)
	msg = lastLine(errOut)
	if code != exitUsage || !strings.Contains(msg, "does not fit in host memory") || !strings.Contains(msg, "(fits); host:") ||
		!strings.Contains(msg, "model optimizer state on the host (offload)") || !strings.Contains(msg, "--offload=false (GPU peak") {
		t.Errorf("offload to a small host: code %d: %s", code, msg)
	}

	_, errOut, code = runGPU(t, free, host, append(run, "--skip-preflight")...)
	if code == 0 || strings.Contains(lastLine(errOut), "does not fit") || !strings.Contains(errOut, "running anyway") {
		t.Errorf("--skip-preflight: code %d: %s", code, lastLine(errOut))
	}
}

// cachingStandIn is a GPU stand-in whose allocator reports what it held.
type cachingStandIn struct {
	gpuStandIn
	heldPeak int64
}

func (c cachingStandIn) CacheStats() (inUse, cached, reserved, peak int64) {
	return 0, 0, 0, c.heldPeak
}

// TestLogMemory: a step's memory line carries the device's name, its peak
// of live buffers and, on a device with a caching allocator (kernels/cuda),
// the most the allocator held (device_reserved_peak_bytes), which
// scripts/gpu-check.sh reports per step of gochat train; a CPU device has
// no such field.
func TestLogMemory(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		var log bytes.Buffer
		g := &Globals{Threads: 1, Log: zerolog.New(&log)}
		c, err := newCPU(g)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Alloc(kernels.F32, 1<<18) // 1 MiB
		if err != nil {
			t.Fatal(err)
		}
		c.Free(b)
		var dev kernels.Device = gpuStandIn{c}
		if withCache {
			dev = cachingStandIn{gpuStandIn{c}, 3 << 30}
		}
		logMemory(g, dev, "step 2 (reward)")
		var rec map[string]any
		if err := json.Unmarshal(log.Bytes(), &rec); err != nil {
			t.Fatalf("%v: %s", err, log.String())
		}
		if rec["step"] != "step 2 (reward)" || rec["device"] != "cuda:7 (stand-in)" || rec["device_peak_bytes"] != float64(1<<20) {
			t.Errorf("cache %v: %s", withCache, log.String())
		}
		held, ok := rec["device_reserved_peak_bytes"]
		msg, _ := rec["message"].(string)
		if withCache && (held != float64(3<<30) || !strings.Contains(msg, "allocator held at most 3.00 GiB")) {
			t.Errorf("with a caching allocator: %s", log.String())
		}
		if !withCache && ok {
			t.Errorf("a device without a cache reports one: %s", log.String())
		}
	}
}
