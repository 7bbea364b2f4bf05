package cli

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/demo"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/train"
)

// demoGenerator is the demo recipe's generator: the synthetic task of
// package demo, a byte-level tokenizer and a randomly initialised model.
type demoGenerator struct {
	task   *demo.Task
	arch   string // --arch ("" = opt)
	config string // the models' config.json (demo.ModelConfigFor)
}

// Prepare writes the demo's data, tokenizer and from-scratch model into
// dir (data/ and base/).
func (d *demoGenerator) Prepare(g *Globals, dir string, seed uint64) error {
	opts := demo.DefaultOptions
	opts.Seed = seed
	task, err := demo.Make(opts)
	if err != nil {
		return err
	}
	if err := task.Write(filepath.Join(dir, "data")); err != nil {
		return err
	}
	base := filepath.Join(dir, "base")
	if err := demo.WriteTokenizer(base); err != nil {
		return err
	}
	if err := d.claimArch(dir); err != nil {
		return err
	}
	cfg, err := model.ParseConfig([]byte(d.config))
	if err != nil {
		return err
	}
	dev, err := newDevice(g)
	if err != nil {
		return err
	}
	defer closeDevice(g, dev) // a GPU's memory goes back before step 1
	m, err := model.New(dev, cfg, model.Options{})
	if err != nil {
		return err
	}
	m.InitRandom(seed, 0.02)
	if err := m.Save(base, model.SaveOptions{}); err != nil {
		return err
	}
	d.task = task
	return nil
}

// Check grades an answer with the task's exact checker.
func (d *demoGenerator) Check(prompt, answer string) (right, ok bool) {
	q, ok := demo.ParsePrompt(prompt)
	return ok && q.Correct(answer), ok
}

// Config is the demo model's architecture.
func (d *demoGenerator) Config() (*model.Config, error) {
	return model.ParseConfig([]byte(d.config))
}

// demoArchFile records in the demo's folder the architecture its models
// were made with.
const demoArchFile = "arch"

// claimArch records the architecture in dir, or refuses a folder made
// with another one: the steps finished on those models would be skipped.
func (d *demoGenerator) claimArch(dir string) error {
	arch := cmp.Or(d.arch, "opt")
	path := filepath.Join(dir, demoArchFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(b)) != arch:
		return usageErrorf("%s holds a demo made with --arch %s, not %s: use another --output-dir", filepath.Dir(dir), strings.TrimSpace(string(b)), arch)
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeFileAtomic(path, []byte(arch+"\n"))
}

// Report writes report.json and report.html.
func (d *demoGenerator) Report(g *Globals, out string, seconds map[int]float64) error {
	return demoReport(g, out, d.task, seconds)
}

// demoEval scores held-out questions: greedy answers of a model, graded by
// the exact checker, and the reward model's mean score of those answers.
func demoEval(g *Globals, task *demo.Task, modelDir, rewardDir string) (acc, rewardMean float64, err error) {
	dev, err := newDevice(g)
	if err != nil {
		return 0, 0, err
	}
	defer closeDevice(g, dev)
	m, err := model.Load(dev, modelDir, model.LoadOptions{ValueHead: "no"})
	if err != nil {
		return 0, 0, err
	}
	rm, err := model.Load(dev, rewardDir, model.LoadOptions{ValueHead: "require"})
	if err != nil {
		return 0, 0, err
	}
	tok, _, _, _, err := loadDataTokenizer(modelDir, g.Threads)
	if err != nil {
		return 0, 0, err
	}
	s, _ := model.NewSampler(model.SampleOptions{Greedy: true})
	var prompts [][]int32
	for _, q := range task.EvalQuestions {
		prompts = append(prompts, tok.Encode(q.Prompt()))
	}
	gens, err := m.Generate(prompts, 6, s)
	if err != nil {
		return 0, 0, err
	}
	right := 0
	var seqs [][]int32
	for i, gen := range gens {
		ans := gen.Tokens
		if n := len(ans); n > 0 && int(ans[n-1]) == m.Config.EOSTokenID {
			ans = ans[:n-1]
		}
		text, err := tok.t.Decode(ans, true)
		if err != nil {
			return 0, 0, fmt.Errorf("demo eval: %w", err)
		}
		if task.EvalQuestions[i].Correct(text) {
			right++
		}
		// Scored as step 3 scores answers and step 2 trained the reward
		// model: prompt + answer (no EOS) + end text, tokenized as one text.
		seq, err := reward.SequenceFromIDs(tok.t, prompts[i], gen.Tokens, int32(m.Config.EOSTokenID), data.DefaultEndText)
		if err != nil {
			return 0, 0, fmt.Errorf("demo eval: %w", err)
		}
		seqs = append(seqs, seq)
	}
	scores, err := reward.Score(rm, seqs, 0)
	if err != nil {
		return 0, 0, err
	}
	var sum float64
	for _, v := range scores {
		sum += float64(v)
	}
	return float64(right) / float64(len(gens)), sum / float64(len(scores)), nil
}

// demoReport writes report.json and report.html for a demo run.
func demoReport(g *Globals, out string, task *demo.Task, seconds map[int]float64) error {
	read := func(dir string) []map[string]float64 {
		recs, _ := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
		return recs
	}
	last := func(recs []map[string]float64, key string) float64 {
		for i := len(recs) - 1; i >= 0; i-- {
			if v, ok := recs[i][key]; ok {
				return v
			}
		}
		return 0
	}
	first := func(recs []map[string]float64, key string) float64 {
		for _, r := range recs {
			if v, ok := r[key]; ok {
				return v
			}
		}
		return 0
	}
	sftR, rwR, ppoR := read(filepath.Join(out, "actor")), read(filepath.Join(out, "reward")), read(filepath.Join(out, "ppo"))
	var tm ppo.Timing
	if b, err := os.ReadFile(filepath.Join(out, "ppo", ppo.TimingFile)); err == nil {
		_ = json.Unmarshal(b, &tm)
	}
	gen, trn := tm.GenerationSeconds, tm.TrainingSeconds
	rewardDir := filepath.Join(out, "reward")
	sftAcc, sftRew, err := demoEval(g, task, filepath.Join(out, "actor"), rewardDir)
	if err != nil {
		return err
	}
	ppoAcc, ppoRew, err := demoEval(g, task, filepath.Join(out, "ppo", "actor"), rewardDir)
	if err != nil {
		return err
	}
	emaAcc := 0.0
	if _, err := os.Stat(filepath.Join(out, "ppo", "actor_ema", "config.json")); err == nil {
		if emaAcc, _, err = demoEval(g, task, filepath.Join(out, "ppo", "actor_ema"), rewardDir); err != nil {
			return err
		}
	}
	report := map[string]any{
		"sft": map[string]any{"steps": last(sftR, "step"), "train_loss_first": first(sftR, "loss"),
			"train_loss_last": last(sftR, "loss"), "eval_loss": last(sftR, "eval_loss")},
		"reward": map[string]any{"steps": last(rwR, "step"), "eval_accuracy": last(rwR, "eval_accuracy"),
			"chosen_mean": last(rwR, "chosen_mean"), "rejected_mean": last(rwR, "rejected_mean")},
		"ppo": map[string]any{"steps": last(ppoR, "step"), "reward_mean_first": first(ppoR, "reward_score"),
			"reward_mean_last": last(ppoR, "reward_score"), "kl_last": last(ppoR, "kl"),
			"answer_accuracy_first": first(ppoR, "answer_accuracy"), "answer_accuracy_last": last(ppoR, "answer_accuracy")},
		"eval": map[string]any{"prompts": len(task.EvalQuestions), "sft_accuracy": sftAcc, "ppo_accuracy": ppoAcc,
			"ppo_ema_accuracy": emaAcc, "sft_reward_mean": sftRew, "ppo_reward_mean": ppoRew},
		"timing": map[string]any{"step1_seconds": seconds[1], "step2_seconds": seconds[2], "step3_seconds": seconds[3],
			"generation_seconds": gen, "training_seconds": trn, "experience_seconds": tm.ExperienceSeconds,
			"generation_tokens_per_sec": tm.GenerationTokensPerSec},
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	if err := writeFileAtomic(filepath.Join(out, "report.json"), append(b, '\n')); err != nil {
		return err
	}
	var h strings.Builder
	h.WriteString("<!doctype html><meta charset=utf-8><title>gochat demo report</title>\n")
	h.WriteString("<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}img{max-width:48%}</style>\n")
	h.WriteString("<h1>gochat demo</h1><pre>" + html.EscapeString(string(b)) + "</pre>\n")
	for _, p := range []struct{ title, file string }{
		{"SFT loss", "actor/loss.png"}, {"Reward-model accuracy", "reward/accuracy.png"},
		{"Reward-model eval accuracy", "reward/eval_accuracy.png"}, {"PPO reward", "ppo/reward_score.png"},
		{"PPO KL", "ppo/kl.png"}, {"PPO answer accuracy (sampled, exact checker)", "ppo/answer_accuracy.png"},
	} {
		img, err := os.ReadFile(filepath.Join(out, p.file))
		if err != nil {
			continue
		}
		fmt.Fprintf(&h, "<figure style='display:inline-block;width:48%%'><figcaption>%s</figcaption><img style='max-width:100%%' src='data:image/png;base64,%s'></figure>\n",
			html.EscapeString(p.title), base64.StdEncoding.EncodeToString(img))
	}
	fmt.Fprintf(&h, "<p>Held-out accuracy (exact checker): SFT %.3f, PPO %.3f, PPO EMA %.3f.</p>\n", sftAcc, ppoAcc, emaAcc)
	if err := writeFileAtomic(filepath.Join(out, "report.html"), []byte(h.String())); err != nil {
		return err
	}
	g.Log.Info().Float64("sft_accuracy", sftAcc).Float64("ppo_accuracy", ppoAcc).Float64("ppo_ema_accuracy", emaAcc).
		Float64("reward_eval_accuracy", last(rwR, "eval_accuracy")).Str("report", filepath.Join(out, "report.html")).Msg("demo report")
	return nil
}
