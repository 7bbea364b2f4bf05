package recipes

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestBuiltinsParse(t *testing.T) {
	if len(Names()) == 0 {
		t.Fatal("no built-in recipes")
	}
	for _, n := range Names() {
		r, err := Load(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if r.Description == "" || r.Actor == "" {
			t.Errorf("%s: description and actor are required", n)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"descripton: typo\n", "descripton"},
		{"steps:\n  sfft: {}\n", `unknown step "sfft"`},
		{"steps:\n  sft: {learning-rate: {a: 1}}\n", "steps.sft.learning-rate"},
		{"", "empty"},
		{"actor: [1, 2\n", "recipe x.yaml"},
		{"later:\n  sfft: {zero-stage: 3}\n", `unknown step "sfft" under later`},
		{"later:\n  ppo: {actor-zero-stage: {a: 1}}\n", "later.ppo.actor-zero-stage"},
		{"steps:\n  sft: {lora-dim: 8}\nlater:\n  sft: {lora-dim: 8}\n", "later.sft.lora-dim is also under steps.sft"},
		{"budget: {gpus: 8}\n", "gpus without gpu_memory_gb"},
		{"budget: {gpus: 8, gpu_memory_gb: 40, cpu_memory_gb: 24}\n", "not both"},
		{"budget: {gpu_memory_gb: 40}\n", "need gpus"},
		{"budget: {cpu_memory_gb: -1}\n", "negative"},
		{"budget: {gpu: 1}\n", "gpu"},
	} {
		_, err := Parse([]byte(c.yaml), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
	if _, err := Load("no-such-recipe"); err == nil || !strings.Contains(err.Error(), "unknown recipe") {
		t.Errorf("unknown recipe: %v", err)
	}
}

func TestApplyCommandLineWins(t *testing.T) {
	r, err := Parse([]byte("actor: a\nsteps:\n  sft: {learning-rate: 0.5, data: [x, y], max-seq-len: 64}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("sft", pflag.ContinueOnError)
	lr := fs.Float64("learning-rate", 1, "")
	data := fs.StringSlice("data", nil, "")
	seq := fs.Int("max-seq-len", 512, "")
	if err := fs.Parse([]string{"--max-seq-len", "128"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply("sft", fs, func(n string) bool { return fs.Lookup(n) != nil }); err != nil {
		t.Fatal(err)
	}
	if *lr != 0.5 || strings.Join(*data, "|") != "x|y" || *seq != 128 {
		t.Errorf("lr %v data %v seq %v", *lr, *data, *seq)
	}
	bad, _ := Parse([]byte("actor: a\nsteps:\n  sft: {learning-rat: 1}\n"), "t.yaml")
	if _, err := bad.Apply("sft", fs, func(n string) bool { return fs.Lookup(n) != nil }); err == nil || !strings.Contains(err.Error(), "learning-rat") {
		t.Errorf("typo in a flag name: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, n := range Names() {
		b, _ := builtin.ReadFile(n + ".yaml")
		f.Add(b)
	}
	f.Add([]byte("steps: {sft: {a: [1, [2]]}}"))
	f.Add([]byte("budget: {gpus: 8, gpu_memory_gb: 80, nodes: 8}\nlater: {ppo: {actor-zero-stage: 3, offload: true}}"))
	f.Add([]byte("budget: {cpu_memory_gb: 24}\nlater: {sft: {zero-stage: [1]}}\nsteps: {sft: {zero-stage: 1}}"))
	f.Add([]byte("budget: {gpus: -1, gpu_memory_gb: .nan}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b, "fuzz.yaml")
	})
}

// TestLaterFlags: flags under later are applied when the command has them
// and returned, not refused, when it does not.
func TestLaterFlags(t *testing.T) {
	r, err := Parse([]byte("actor: a\nsteps:\n  sft: {max-seq-len: 64}\nlater:\n  sft: {zero-stage: 3, offload: true, learning-rate: 0.25}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("sft", pflag.ContinueOnError)
	lr := fs.Float64("learning-rate", 1, "")
	fs.Int("max-seq-len", 512, "")
	later, err := r.Apply("sft", fs, func(n string) bool { return fs.Lookup(n) != nil })
	if err != nil {
		t.Fatal(err)
	}
	if *lr != 0.25 || strings.Join(later, " ") != "--offload true --zero-stage 3" {
		t.Errorf("lr %v, not honoured %q", *lr, later)
	}
}

// TestBudgets checks the budget arithmetic recipe picking uses.
func TestBudgets(t *testing.T) {
	for _, c := range []struct {
		b     Budget
		hw    Hardware
		fits  bool
		ranks int
		s     string
	}{
		{Budget{CPUMemoryGB: 24}, Hardware{MemoryGB: 25}, true, 1, "CPU, 24 GB"},
		{Budget{CPUMemoryGB: 24}, Hardware{MemoryGB: 16}, false, 1, "CPU, 24 GB"},
		{Budget{CPUMemoryGB: 24}, Hardware{GPUs: 1, GPUMemoryGB: 80, MemoryGB: 64}, false, 1, "CPU, 24 GB"},
		{Budget{GPUs: 1, GPUMemoryGB: 48}, Hardware{GPUs: 8, GPUMemoryGB: 80}, true, 1, "1 GPU x 48 GB"},
		{Budget{GPUs: 8, GPUMemoryGB: 40}, Hardware{GPUs: 4, GPUMemoryGB: 80}, false, 8, "8 GPUs x 40 GB"},
		{Budget{GPUs: 8, GPUMemoryGB: 80, Nodes: 8}, Hardware{GPUs: 8, GPUMemoryGB: 80, Nodes: 1}, false, 64, "8 nodes x 8 GPUs x 80 GB"},
	} {
		if c.b.Fits(c.hw) != c.fits || c.b.Ranks() != c.ranks || c.b.String() != c.s {
			t.Errorf("%+v on %+v: fits %v, ranks %d, %q", c.b, c.hw, c.b.Fits(c.hw), c.b.Ranks(), c.b.String())
		}
	}
	if !(Budget{GPUs: 8, GPUMemoryGB: 40}).Larger(Budget{GPUs: 1, GPUMemoryGB: 80}) || (Budget{CPUMemoryGB: 12}).Larger(Budget{CPUMemoryGB: 24}) {
		t.Error("Larger")
	}
}
