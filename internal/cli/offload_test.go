package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSFTOffload: gochat sft and reward with --offload (everything, and
// half the parameters at --offload-ratio 0.5), in fp32 and bf16, save the
// weights of the same run without offload bit for bit; a run saved with
// offload resumes without it. On the CPU the host is a second CPU
// device, so this tests the flags' path, not a memory saving.
func TestSFTOffload(t *testing.T) {
	mdir := tinyModel(t)
	out := t.TempDir()
	for _, step := range []string{"sft", "reward"} {
		for _, dt := range []string{"fp32", "bf16"} {
			train := func(name string, extra ...string) []byte {
				t.Helper()
				dir := filepath.Join(out, step+"-"+dt+"-"+name)
				args := append([]string{"--log-format", "json", step, "--model", mdir, "--data", sample(), "--data-split", "1,1,0",
					"--max-seq-len", "32", "--per-device-train-batch-size", "4", "--max-steps", "3", "--dtype", dt,
					"--output-dir", dir, "--data-cache", "off", "--skip-preflight"}, extra...)
				_, errOut, code := run(t, args...)
				if code != 0 {
					t.Fatalf("%s %s %s: %s", step, dt, name, errOut)
				}
				if len(extra) > 0 && extra[0] == "--offload" && !strings.Contains(errOut, "no memory is saved") {
					t.Errorf("%s %s %s: the log does not say that offloading to the CPU saves nothing:\n%s", step, dt, name, errOut)
				}
				b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			want := train("device")
			for name, extra := range map[string][]string{
				"offload":   {"--offload"},
				"ratio-0.5": {"--offload", "--offload-ratio", "0.5"},
			} {
				if got := train(name, extra...); !bytes.Equal(got, want) {
					t.Errorf("%s %s with %v: the saved weights differ from the run without offload", step, dt, extra)
				}
			}
		}
	}
}

func TestOffloadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sft", "--model", "m", "--output-dir", "o", "--offload-ratio", "0.5"}, "--offload-ratio needs --offload"},
		{[]string{"sft", "--model", "m", "--output-dir", "o", "--offload", "--offload-ratio", "1.5"}, "want a fraction in [0, 1]"},
		{[]string{"ppo", "--actor", "a", "--critic", "c", "--output-dir", "o", "--offload-ratio", "-1", "--offload"}, "want a fraction in [0, 1]"},
		{[]string{"train", "--actor", "a", "--reward", "r", "--output-dir", "o", "--offload-ratio", "0.3"}, "--offload-ratio needs --offload"},
	} {
		_, errOut, code := run(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, %q; want an error with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPPOOffload: gochat ppo with --offload (the actor's and the critic's
// optimizer state, half of it at --offload-ratio 0.5),
// --offload-reference-model and --offload-reward-model saves the actor,
// critic and EMA of the run without them bit for bit, and logs the same
// metrics (the reference log-probs and the reward scores enter the
// rewards, so a frozen model computing anything else would show).
func TestPPOOffload(t *testing.T) {
	actor, critic := tinyModel(t), rewardModel(t)
	out := t.TempDir()
	ppoRun := func(name string, extra ...string) string {
		t.Helper()
		dir := filepath.Join(out, name)
		args := append([]string{"--log-format", "json", "--threads", "1", "ppo", "--actor", actor, "--critic", critic,
			"--data", sample(), "--data-split", "1,1,8", "--max-prompt-seq-len", "96", "--max-answer-seq-len", "8",
			"--per-device-generation-batch-size", "2", "--per-device-training-batch-size", "2", "--max-steps", "3",
			"--actor-learning-rate", "1e-3", "--critic-learning-rate", "1e-3", "--enable-ema", "--seed", "7",
			"--dtype", "bf16", "--output-dir", dir, "--data-cache", "off", "--skip-preflight"}, extra...)
		_, errOut, code := run(t, args...)
		if code != 0 {
			t.Fatalf("ppo %s: %s", name, errOut)
		}
		return dir
	}
	want := ppoRun("device")
	got := ppoRun("offload", "--offload", "--offload-ratio", "0.5", "--offload-reference-model", "--offload-reward-model")
	for _, sub := range []string{"actor", "critic", "actor_ema"} {
		a, err := os.ReadFile(filepath.Join(want, sub, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(got, sub, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the saved weights differ from the run without offload", sub)
		}
	}
	mw, mg := metrics(t, want), metrics(t, got)
	if len(mw) != len(mg) || len(mw) == 0 {
		t.Fatalf("%d and %d metrics records", len(mw), len(mg))
	}
	for i := range mw {
		for k, v := range mw[i] {
			if k == "tokens_per_sec" || strings.HasSuffix(k, "_seconds") || strings.HasSuffix(k, "_sec") {
				continue
			}
			if mg[i][k] != v {
				t.Errorf("record %d: %s %v, without offload %v", i, k, mg[i][k], v)
			}
		}
	}
}
