package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/tensor"
	"github.com/gochat-ai/gochat/train"
)

// The DDP golden (issue 11): scripts/gen_ddp_golden.py trains a tiny OPT
// with PyTorch's DistributedDataParallel (gloo, 2 processes, float64) on
// the examples and batches gochat computes, and
// testdata/ddp_golden.safetensors keeps the initial weights, the inputs
// (examples, the micro-batches of every rank at every step,
// hyper-parameters: metadata "inputs"), the per-step loss, gradient norm
// and learning rate, and every weight after the 10 steps. Regenerate it
// with
//
//	/usr/bin/python3 scripts/gen_ddp_golden.py
//
// which runs TestDDPGoldenInputs (GOCHAT_DDP_INPUTS set) to get the inputs
// from gochat's own data pipeline and training loop.
const ddpGoldenFile = "testdata/ddp_golden.safetensors"

// ddpModelConfig is the tiny OPT of the DDP golden: the byte-level
// tokenizer's 260 ids plus 4 rows no example uses (they only decay).
const ddpModelConfig = `{"model_type":"opt","vocab_size":264,"hidden_size":32,"ffn_dim":64,"num_hidden_layers":2,
"num_attention_heads":4,"max_position_embeddings":40,"do_layer_norm_before":true,"dropout":0.1}`

// ddpRanks is the number of processes, and ddpSFTArgs the run: fp32,
// dropout off, 10 steps of a global batch of 2 × 2 × 2 = 8 of the 24
// examples (three steps an epoch, so the run crosses three epoch ends,
// each epoch with its own order; every round full), warm-up then cosine,
// weight decay. --max-grad-norm 6 clips steps 1-5 (norms 6.7-9.2) and not
// steps 6-10 (4.0-5.7), so a wrong gradient scale, which AdamW alone
// would almost hide, changes the weights: dividing the gradient sums by
// the batches of one rank instead of all moved a weight by 1.1e-3
// relative.
const ddpRanks = 2

func ddpSFTArgs(mdir, dataPath, out string) []string {
	return []string{"sft", "--model", mdir, "--data", dataPath, "--data-split", "1,0,0", "--max-seq-len", "32",
		"--per-device-train-batch-size", "2", "--gradient-accumulation-steps", "2", "--max-steps", "10",
		"--learning-rate", "2e-3", "--weight-decay", "0.1", "--lr-scheduler-type", "cosine", "--num-warmup-steps", "2",
		"--max-grad-norm", "6", "--seed", "5", "--dropout", "0", "--dtype", "fp32", "--loss-on", "response",
		"--data-cache", "off", "--output-dir", out}
}

// ddpRows are the dataset: prompts and responses of 1 to 34 bytes, so
// micro-batches mix lengths and loss-token counts; a few examples are cut
// at 32 tokens, and one prompt fills all 32 (no loss tokens).
var ddpRows = [][2]string{
	{"Q: 2+3?\nA:", " 5"},
	{"Q: capital of France?\nA:", " Paris."},
	{"Say hi.", " Hi!"},
	{"Q: opposite of up?\nA:", " down"},
	{"Translate 'chat' to English:", " cat"},
	{"Q: 7*6?\nA:", " 42, as everyone knows."},
	{"Name a color.", " Blue."},
	{"Q: is ice cold?\nA:", " Yes, it is."},
	{"Continue: a b c", " d e f g"},
	{"Q: first month?\nA:", " January"},
	{"Write a word that rhymes with cat.", " hat"},
	{"Q: 10-4?\nA:", " 6"},
	{"Hello", " there, friend. How can I help?"},
	{"Q: largest planet?\nA:", " Jupiter."},
	{"Spell dog backwards.", " god"},
	{"Q: water boils at?\nA:", " 100 C at sea level."},
	{"Count to three.", " one two three"},
	{"Q: 9/3?\nA:", " 3"},
	{"Give an animal.", " A fox."},
	{"Q: color of grass?\nA:", " green"},
	{"Finish: the quick brown", " fox jumps"},
	{"Q: days in a week?\nA:", " seven"},
	{"Q: 1+1?\nA:", " 2"},
	{"Thank you!", " You are welcome."},
}

// ddpHparams are the settings the DDP reference applies, as gochat
// resolves them from ddpSFTArgs.
type ddpHparams struct {
	Ranks       int        `json:"ranks"`
	MicroBatch  int        `json:"per_device_train_batch_size"`
	GradAccum   int        `json:"gradient_accumulation_steps"`
	Steps       int        `json:"steps"`
	Warmup      int        `json:"num_warmup_steps"`
	Schedule    string     `json:"lr_scheduler_type"`
	LR          float64    `json:"learning_rate"`
	WeightDecay float64    `json:"weight_decay"`
	MaxGradNorm float64    `json:"max_grad_norm"`
	Betas       [2]float64 `json:"betas"`
	Eps         float64    `json:"eps"`
	LossOn      string     `json:"loss_on"`
	MaxSeqLen   int        `json:"max_seq_len"`
	PAD         int        `json:"pad_token_id"`
}

// ddpExample is one training example as gochat tokenized it.
type ddpExample struct {
	IDs       []int32 `json:"ids"`
	PromptLen int     `json:"prompt_len"`
}

// ddpInputs is what the DDP reference must see to compute what gochat
// computes: the examples, and Steps[s][r], the micro-batches (indices into
// Examples, in order) that rank r computes in step s+1.
type ddpInputs struct {
	Hparams  ddpHparams   `json:"hparams"`
	Examples []ddpExample `json:"examples"`
	Steps    [][][][]int  `json:"steps"`
}

// writeDDPData writes the tokenizer files (a byte-level BPE in OPT's
// shape without merges: <s> <pad> </s> <unk> then the 256 bytes) into
// mdir and the dataset to a JSONL file, whose path it returns.
func writeDDPData(t *testing.T, mdir string) string {
	t.Helper()
	vocab := map[string]int{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
	n := 0
	for b := range 256 { // GPT-2's bytes_to_unicode
		r := rune(b)
		if !(('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = 4 + b
	}
	vb, _ := json.Marshal(vocab)
	files := map[string]string{
		"vocab.json":            string(vb),
		"merges.txt":            "#version: 0.2\n",
		"tokenizer_config.json": `{"add_bos_token": true, "bos_token": "</s>", "eos_token": "</s>", "unk_token": "</s>", "pad_token": "<pad>", "tokenizer_class": "GPT2Tokenizer"}`,
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(mdir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var jl bytes.Buffer
	for _, r := range ddpRows {
		b, _ := json.Marshal(map[string]string{"prompt": r[0], "chosen": r[1], "rejected": " no", "response": r[1]})
		jl.Write(append(b, '\n'))
	}
	path := filepath.Join(filepath.Dir(mdir), "data.jsonl")
	if err := os.WriteFile(path, jl.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// ddpRecorder is a RoundStage that only records the batches of its rank.
type ddpRecorder struct {
	steps [][][]int
	cur   [][]int
}

func (r *ddpRecorder) Batch(_ context.Context, idx []int, _ int) (train.BatchStats, error) {
	r.cur = append(r.cur, slices.Clone(idx))
	return train.BatchStats{}, nil
}

func (r *ddpRecorder) Update(context.Context, train.Round) (map[string]float64, error) {
	r.steps, r.cur = append(r.steps, r.cur), nil
	return map[string]float64{}, nil
}

func (r *ddpRecorder) Evaluate() (*train.Eval, error)          { return nil, nil }
func (r *ddpRecorder) State() (map[string]kernels.Buffer, any) { return nil, struct{}{} }
func (r *ddpRecorder) Restore(json.RawMessage) error           { return nil }

// collectDDPInputs returns what `gochat sft args` (args[0] is "sft") on
// ranks ranks computes from: the options as the command parses them, the
// training examples from its loadData, and each rank's batches from
// train.RunRounds over in-process ranks with the loop settings runStage
// gives it.
func collectDDPInputs(t *testing.T, args []string, ranks int) ddpInputs {
	t.Helper()
	g := &Globals{Log: zerolog.Nop(), Threads: 1}
	var o *StageOptions
	cmd := newSFTCmd(g, func(so *StageOptions) error { o = so; return nil })
	cmd.SetArgs(args[1:])
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var err error
	if o.modelDir, o.tokDir, err = resolveModelTokenizer(g, o.Model, o.Tokenizer, o.Revision); err != nil {
		t.Fatal(err)
	}
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	m, err := model.Load(dev, o.modelDir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.loadTokenizer(); err != nil {
		t.Fatal(err)
	}
	trainSet, _, err := o.loadData(m)
	if err != nil {
		t.Fatal(err)
	}
	in := ddpInputs{Hparams: ddpHparams{Ranks: ranks, MicroBatch: o.TrainBatch, GradAccum: o.GradAccum, Steps: o.MaxSteps,
		Warmup: o.Warmup, Schedule: o.Scheduler, LR: o.LR, WeightDecay: o.WeightDecay, MaxGradNorm: o.MaxGradNorm,
		Betas: [2]float64{optim.DefaultAdamW.Beta1, optim.DefaultAdamW.Beta2}, Eps: optim.DefaultAdamW.Eps,
		LossOn: o.LossOn, MaxSeqLen: o.MaxSeqLen, PAD: m.Config.PadTokenID}}
	for _, ex := range trainSet.Examples {
		in.Examples = append(in.Examples, ddpExample{IDs: ex.IDs, PromptLen: ex.PromptLen})
	}
	devs := make([]kernels.Device, ranks)
	for r := range devs {
		devs[r], _ = cpu.New(cpu.Options{Threads: 1})
	}
	recs := make([]*ddpRecorder, ranks)
	err = disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
		rec := &ddpRecorder{}
		recs[c.Rank()] = rec
		cfg := train.Config{TrainSize: len(trainSet.Examples), MicroBatch: o.TrainBatch, GradAccum: o.GradAccum,
			Epochs: o.Epochs, MaxSteps: o.MaxSteps, Seed: o.Seed, Log: zerolog.Nop(), Comm: c}
		_, err := train.RunRounds(context.Background(), dev, cfg, rec)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	in.Steps = make([][][][]int, len(recs[0].steps))
	for s := range in.Steps {
		for _, rec := range recs {
			in.Steps[s] = append(in.Steps[s], rec.steps[s])
		}
	}
	return in
}

// TestDDPGoldenInputs writes the inputs of scripts/gen_ddp_golden.py to
// the directory $GOCHAT_DDP_INPUTS: model/ (config.json, placeholder
// weights the script replaces, tokenizer files), data.jsonl, and
// inputs.json (ddpInputs). Without the variable it skips: the script runs
// it.
func TestDDPGoldenInputs(t *testing.T) {
	out := os.Getenv("GOCHAT_DDP_INPUTS")
	if out == "" {
		t.Skip("run by scripts/gen_ddp_golden.py (GOCHAT_DDP_INPUTS=DIR)")
	}
	mdir := filepath.Join(out, "model")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseConfig([]byte(ddpModelConfig))
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	m, err := model.New(dev, cfg, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(1, 0.02)
	if err := m.Save(mdir, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	dataPath := writeDDPData(t, mdir)
	in := collectDDPInputs(t, ddpSFTArgs(mdir, dataPath, filepath.Join(out, "unused")), ddpRanks)
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "inputs.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// safetensorsMetadata reads the __metadata__ of a safetensors file.
func safetensorsMetadata(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 {
		t.Fatalf("%s: not a safetensors file", path)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		t.Fatalf("%s: header length %d", path, n)
	}
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h.Meta
}

// TestDDPGolden (issue 11): `mpirun -np 2 gochat sft` (fp32, dropout off,
// 10 steps; ddpSFTArgs) from the golden's initial weights gives the
// weights of PyTorch's DistributedDataParallel on 2 gloo processes
// (testdata/ddp_golden.safetensors, from scripts/gen_ddp_golden.py; see
// ddpGoldenFile): every weight w within 1e-5 of the golden's relative to
// max(|w|, RMS of the golden's weights) — gochat computes in fp32, the
// reference in float64. The per-step loss, gradient norm (before
// clipping) and learning rate match within 1e-5 relative (to
// max(|x|, 1e-3)) too. First it checks that gochat still computes from
// the golden's inputs (the same examples, each rank's micro-batches at
// every step, the same settings); when gochat's data pipeline or batch
// order changes on purpose, regenerate the golden. It runs at ZeRO
// stages 0-3: partitioning changes where the update is computed, not
// what it is. Measured: largest weight difference 4.7e-7,
// metrics 1.2e-7. Without MPI it skips, except in CI (then it fails); it
// needs no Python.
func TestDDPGolden(t *testing.T) {
	launcher := mpirunLauncher(t)
	if testing.Short() {
		t.Skip("builds gochat and runs mpirun")
	}
	gold, err := tensor.Open(ddpGoldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer gold.Close()
	meta := safetensorsMetadata(t, ddpGoldenFile)
	var want ddpInputs
	if err := json.Unmarshal([]byte(meta["inputs"]), &want); err != nil {
		t.Fatalf("%s: metadata \"inputs\": %v", ddpGoldenFile, err)
	}
	read := func(name string) []float32 {
		t.Helper()
		info, ok := gold.Info(name)
		if !ok {
			t.Fatalf("%s: no tensor %s", ddpGoldenFile, name)
		}
		v := make([]float32, info.Numel())
		if err := gold.ReadF32(name, v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	// The initial model: the golden's config and initial weights, with the
	// test's tokenizer files.
	dir := t.TempDir()
	mdir := filepath.Join(dir, "model")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mdir, "config.json"), []byte(meta["config"]), 0o644); err != nil {
		t.Fatal(err)
	}
	var names []string // the model's tensors (Hugging Face names)
	var init []tensor.WriteTensor
	for _, n := range gold.Names() {
		if name, ok := strings.CutPrefix(n, "init."); ok {
			info, _ := gold.Info(n)
			names = append(names, name)
			init = append(init, tensor.WriteTensor{Name: name, DType: tensor.F32, Shape: info.Shape, F32: read(n)})
		}
	}
	if err := tensor.WriteSafetensors(filepath.Join(mdir, "model.safetensors"), init, nil); err != nil {
		t.Fatal(err)
	}
	dataPath := writeDDPData(t, mdir)
	got := collectDDPInputs(t, ddpSFTArgs(mdir, dataPath, filepath.Join(dir, "unused")), ddpRanks)
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.Marshal(got)
		t.Fatalf("gochat no longer computes from the golden's inputs (settings, examples or batch order changed); "+
			"regenerate with /usr/bin/python3 scripts/gen_ddp_golden.py if that is intended.\ngochat: %s\ngolden: %s", gb, meta["inputs"])
	}

	finals, starts := map[string][]float32{}, map[string][]float32{}
	var sq float64
	count := 0
	for _, name := range names {
		finals[name], starts[name] = read("final."+name), read("init."+name)
		for _, x := range finals[name] {
			sq += float64(x) * float64(x)
		}
		count += len(finals[name])
	}
	rms := math.Sqrt(sq / float64(count))
	refs := map[string][]float32{}
	for _, k := range []string{"loss", "grad_norm", "lr"} {
		refs[k] = read(k)
	}

	// DDP replicates everything; ZeRO 1-3 partition the optimizer state,
	// gradients and parameters but must compute the same update.
	bin := buildGochat(t)
	for stage := 0; stage <= 3; stage++ {
		t.Run(fmt.Sprintf("zero-%d", stage), func(t *testing.T) {
			out := filepath.Join(dir, fmt.Sprintf("out-zero%d", stage))
			args := append(ddpSFTArgs(mdir, dataPath, out), "--zero-stage", fmt.Sprint(stage))
			argv := append(append(launcher, "-np", fmt.Sprint(ddpRanks), bin, "--log-format", "json", "--threads", "1"), args...)
			log := mustRun(t, "mpirun", argv)
			if !strings.Contains(log, fmt.Sprintf(`"ranks":%d`, ddpRanks)) || (stage > 0 && !strings.Contains(log, fmt.Sprintf(`"zero_stage":%d`, stage))) {
				t.Fatalf("the run did not report %d ranks at ZeRO-%d:\n%s", ddpRanks, stage, log)
			}
			checkDDPGolden(t, out, names, finals, starts, refs, rms, want.Hparams.Steps)
		})
	}
}

// checkDDPGolden compares the model and metrics a run saved in out with
// the golden's final weights (names; rms is their RMS), initial weights
// and per-step loss, grad_norm and lr (refs) of steps steps.
func checkDDPGolden(t *testing.T, out string, names []string, finals, starts, refs map[string][]float32, rms float64, steps int) {
	t.Helper()
	res, err := tensor.Open(filepath.Join(out, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if g := res.Names(); !slices.Equal(slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(names))) {
		t.Fatalf("gochat saved %v; the golden has %v", g, names)
	}
	worst, worstAt, moved := 0.0, "", 0.0
	for _, name := range names {
		w, start := finals[name], starts[name]
		info, _ := res.Info(name)
		g := make([]float32, info.Numel())
		if err := res.ReadF32(name, g); err != nil {
			t.Fatal(err)
		}
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, the golden %d", name, len(g), len(w))
		}
		for i := range w {
			e := math.Abs(float64(g[i])-float64(w[i])) / math.Max(math.Abs(float64(w[i])), rms)
			if e > worst {
				worst, worstAt = e, fmt.Sprintf("%s[%d]: %v vs %v", name, i, g[i], w[i])
			}
			moved = math.Max(moved, math.Abs(float64(w[i]-start[i])))
		}
	}
	t.Logf("largest relative difference from DDP %.3g (%s); rms %.3g; training moved a weight by up to %.3g", worst, worstAt, rms, moved)
	if worst > 1e-5 {
		t.Errorf("gochat on %d ranks vs PyTorch DDP: %s, relative %.3g > 1e-5", ddpRanks, worstAt, worst)
	}
	if moved < 5e-3 {
		t.Errorf("training moved the weights by %g only: the comparison says little", moved)
	}

	var recs []map[string]float64 // the training records (not the final evaluation's)
	for _, rec := range metrics(t, out) {
		if _, ok := rec["loss"]; ok {
			recs = append(recs, rec)
		}
	}
	if len(recs) != steps {
		t.Fatalf("%d metrics records, want %d", len(recs), steps)
	}
	mworst := 0.0
	for _, k := range []string{"loss", "grad_norm", "lr"} {
		ref := refs[k]
		for s, rec := range recs {
			a, b := rec[k], float64(ref[s])
			e := math.Abs(a-b) / math.Max(math.Abs(b), 1e-3)
			mworst = math.Max(mworst, e)
			if e > 1e-5 {
				t.Errorf("step %d: %s %v, DDP %v", s+1, k, a, b)
			}
		}
	}
	t.Logf("metrics (loss, grad_norm, lr of %d steps): largest relative difference %.3g", len(recs), mworst)
}
