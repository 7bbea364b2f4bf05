package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// logLines parses the JSON log lines of stderr (other lines are skipped).
func logLines(stderr string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// findLog returns the first log line at level whose fields include want.
func findLog(stderr, level string, want map[string]any) map[string]any {
	for _, m := range logLines(stderr) {
		if m["level"] != level {
			continue
		}
		ok := true
		for k, v := range want {
			if m[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

// writeRows writes rows (prompt, chosen, rejected; "null" for a JSON null
// chosen) as a JSONL dataset and returns its path.
func writeRows(t *testing.T, rows [][3]string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range rows {
		row := map[string]any{"prompt": r[0], "chosen": r[1], "rejected": r[2], "response": r[1]}
		if r[1] == "null" {
			row["chosen"] = nil
		}
		j, _ := json.Marshal(row)
		b.Write(append(j, '\n'))
	}
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDataDropsLogged: rows dropped for a null chosen cell are counted in a
// warning that names the dataset, its split, the step, the count and the
// column (issue 13, item 7).
func TestDataDropsLogged(t *testing.T) {
	mdir := tinyModel(t)
	rows := [][3]string{
		{"\n\nHuman: hi\n\nAssistant:", " hello there", " go away"},
		{"\n\nHuman: and?\n\nAssistant:", "null", " no"},
		{"\n\nHuman: why\n\nAssistant:", " because", " dunno"},
		{"\n\nHuman: who\n\nAssistant:", "null", " me"},
		{"\n\nHuman: when\n\nAssistant:", " now", " never"},
	}
	path := writeRows(t, rows)
	_, errOut, code := run(t, "--log-format", "json", "sft", "--model", mdir, "--data", path, "--data-split", "1,0,0",
		"--max-seq-len", "32", "--max-steps", "1", "--data-cache", "off", "--output-dir", filepath.Join(t.TempDir(), "o"))
	if code != 0 {
		t.Fatalf("sft: %s", lastLine(errOut))
	}
	w := findLog(errOut, "warn", map[string]any{"dataset": path, "split": "train", "step": 1.0})
	if w == nil {
		t.Fatalf("no warning about the dropped rows of %s in:\n%s", path, errOut)
	}
	msg, _ := w["message"].(string)
	if w["dropped"] != 2.0 || w["selected"] != 5.0 || !strings.Contains(msg, "2 of 5") || !strings.Contains(msg, "null chosen") {
		t.Errorf("warning %v: want 2 of 5 rows dropped for a null chosen", w)
	}
	// The reward step needs chosen too; phase 3 needs only the prompt, so
	// nothing is dropped there and nothing is said.
	_, errOut, code = run(t, "--log-format", "json", "reward", "--model", rewardModel(t), "--data", path, "--data-split", "0,1,0",
		"--max-seq-len", "32", "--max-steps", "1", "--data-cache", "off", "--output-dir", filepath.Join(t.TempDir(), "r"))
	if code != 0 {
		t.Fatalf("reward: %s", lastLine(errOut))
	}
	if w := findLog(errOut, "warn", map[string]any{"dataset": path, "step": 2.0}); w == nil || w["dropped"] != 2.0 {
		t.Errorf("reward: warning %v, want 2 rows dropped", w)
	}
}

// TestNoTargetTokensRefused: step 1 with every prompt longer than
// --max-seq-len (the default --loss-on response leaves no token to learn
// from) is refused naming the flag and the dataset instead of training
// with loss 0; a dataset where only some examples lose their response
// trains with a warning. Step 2 with every pair identical after truncation,
// and step 3 with every prompt over --max-prompt-seq-len, are refused the
// same way (issue 13, item 7).
func TestNoTargetTokensRefused(t *testing.T) {
	mdir := tinyModel(t)
	long := "\n\nHuman: " + strings.Repeat("tell me a long story about the sea ", 4) + "\n\nAssistant:"
	allLong := writeRows(t, [][3]string{
		{long, " once upon a time", " no"},
		{long + " please", " there was a ship", " never"},
		{long + " now", " on the sea", " stop"},
	})
	out := t.TempDir()
	base := []string{"--log-format", "json", "--max-seq-len", "16", "--max-steps", "1", "--data-cache", "off"}
	args := func(cmd, model, data, split, dir string, extra ...string) []string {
		a := append([]string{cmd, "--model", model, "--data", data, "--data-split", split, "--output-dir", filepath.Join(out, dir)}, base...)
		return append(a, extra...)
	}
	_, errOut, code := run(t, args("sft", mdir, allLong, "1,0,0", "sft")...)
	if code == 0 || !strings.Contains(errOut, "--max-seq-len 16") || !strings.Contains(errOut, allLong) {
		t.Errorf("sft with every prompt over --max-seq-len: code %d, %q; want an error naming --max-seq-len 16 and %s", code, lastLine(errOut), allLong)
	}
	// --loss-on all takes the loss on the prompt too: it trains.
	if _, errOut, code := run(t, args("sft", mdir, allLong, "1,0,0", "sft-all", "--loss-on", "all")...); code != 0 {
		t.Errorf("sft --loss-on all: %s", lastLine(errOut))
	}
	// Some examples keep their response: a warning counts the others.
	mixed := writeRows(t, [][3]string{
		{long, " once upon a time", " no"},
		{"\n\nHuman: hi\n\nAssistant:", " hello", " bye"},
		{"\n\nHuman: yo\n\nAssistant:", " hey", " go"},
	})
	_, errOut, code = run(t, args("sft", mdir, mixed, "1,0,0", "sft-mixed")...)
	if code != 0 {
		t.Fatalf("sft with one long prompt: %s", lastLine(errOut))
	}
	if w := findLog(errOut, "warn", map[string]any{"dataset": mixed, "no_target": 1.0}); w == nil {
		t.Errorf("no warning counting the example without a target token in:\n%s", errOut)
	}
	// Step 2: the prompt fills --max-seq-len, so chosen and rejected are
	// the same 16 tokens.
	_, errOut, code = run(t, args("reward", rewardModel(t), allLong, "0,1,0", "reward")...)
	if code == 0 || !strings.Contains(errOut, "--max-seq-len 16") || !strings.Contains(errOut, allLong) || !strings.Contains(errOut, "identical") {
		t.Errorf("reward with every pair identical after truncation: code %d, %q", code, lastLine(errOut))
	}
	// Step 3: every prompt is longer than --max-prompt-seq-len.
	_, errOut, code = run(t, "--log-format", "json", "ppo", "--actor", mdir, "--critic", mdir, "--reward", rewardModel(t),
		"--data", allLong, "--data-split", "0,0,1", "--max-prompt-seq-len", "8", "--max-answer-seq-len", "4",
		"--data-cache", "off", "--output-dir", filepath.Join(out, "ppo"))
	if code == 0 || !strings.Contains(errOut, "--max-prompt-seq-len 8") || !strings.Contains(errOut, allLong) {
		t.Errorf("ppo with every prompt over --max-prompt-seq-len: code %d, %q", code, lastLine(errOut))
	}
	if w := findLog(errOut, "warn", map[string]any{"dataset": allLong, "step": 3.0}); w == nil || w["too_long"] != 3.0 {
		t.Errorf("ppo: warning %v, want 3 prompts dropped as too long", w)
	}
}

// TestRewardModelNeedsValueHead: a model without a value head
// (v_head.weight) is refused as a reward model — by `gochat score
// --model` and by ppo's --reward, which defaults to --critic — naming the
// flag and the directory, before ppo writes anything to --output-dir; as
// --critic with a trained --reward it is a legitimate start (a fresh
// value head, as the demo recipe does) and a notice says so (issue 13,
// item 7).
func TestRewardModelNeedsValueHead(t *testing.T) {
	mdir, rm := tinyModel(t), rewardModel(t)
	_, errOut, code := run(t, "score", "--model", mdir, "--prompt", "Hi", "--answer", " hello", "--dtype", "fp32")
	if code == 0 || !strings.Contains(errOut, "--model "+mdir) || !strings.Contains(errOut, "no value head") {
		t.Errorf("score with a model without v_head: code %d, %q; want an error naming --model %s", code, lastLine(errOut), mdir)
	}
	if _, errOut, code := run(t, "score", "--model", rm, "--prompt", "Hi", "--answer", " hello", "--dtype", "fp32"); code != 0 {
		t.Errorf("score with a reward model: %s", lastLine(errOut))
	}
	out := filepath.Join(t.TempDir(), "ppo")
	args := []string{"--log-format", "json", "ppo", "--actor", mdir, "--critic", mdir, "--data", sample(), "--data-split", "0,0,1",
		"--max-prompt-seq-len", "100", "--max-answer-seq-len", "4", "--per-device-generation-batch-size", "2",
		"--per-device-training-batch-size", "2", "--max-steps", "1", "--data-cache", "off", "--dtype", "fp32", "--output-dir", out}
	_, errOut, code = run(t, args...)
	if code == 0 || !strings.Contains(errOut, "--reward "+mdir) || !strings.Contains(errOut, "no value head") {
		t.Errorf("ppo with the default --reward (--critic) without v_head: code %d, %q", code, lastLine(errOut))
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused run left --output-dir behind: %v", err)
	}
	_, errOut, code = run(t, append(args, "--reward", rm)...)
	if code != 0 {
		t.Fatalf("ppo with a critic without v_head and a reward model: %s", lastLine(errOut))
	}
	if n := findLog(errOut, "info", map[string]any{"critic": mdir, "fresh_value_head": true}); n == nil {
		t.Errorf("no notice of the critic's fresh value head in:\n%s", errOut)
	}
}
