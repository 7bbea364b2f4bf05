package demo

import (
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/tokenizer"
)

func TestTokenizerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := WriteTokenizer(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != VocabSize {
		t.Errorf("vocabulary %d, want %d", tok.VocabSize(), VocabSize)
	}
	q := Question{7, 5}
	text := q.Prompt() + q.Answer()
	ids := tok.Encode(text, true)
	if ids[0] != 2 || len(ids) != len(text)+1 {
		t.Fatalf("ids %v for %q: want BOS and one id per byte", ids, text)
	}
	back, err := tok.Decode(ids, true)
	if err != nil || back != text {
		t.Errorf("decode %q, %v", back, err)
	}
	eos, _ := tok.EOS()
	pad, _ := tok.PAD()
	if eos != 2 || pad != 1 {
		t.Errorf("eos %d pad %d", eos, pad)
	}
}

func TestTask(t *testing.T) {
	task, err := Make(DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	evalPrompts := map[string]bool{}
	for _, r := range task.Eval {
		evalPrompts[r.Prompt] = true
	}
	right := 0
	for _, part := range [][]Row{task.SFT, task.Pairs, task.Prompts} {
		for _, r := range part {
			if evalPrompts[r.Prompt] {
				t.Fatalf("evaluation prompt %q appears in training data", r.Prompt)
			}
		}
	}
	for _, r := range task.SFT {
		var q Question
		for a := range DefaultOptions.Max {
			for b := range DefaultOptions.Max {
				if (Question{a, b}).Prompt() == r.Prompt {
					q = Question{a, b}
				}
			}
		}
		if q.Correct(r.Chosen) {
			right++
		}
	}
	frac := float64(right) / float64(len(task.SFT))
	if frac < 0.5 || frac > 0.7 {
		t.Errorf("SFT accuracy %.2f, want about %.2f", frac, DefaultOptions.SFTAccuracy)
	}
	for _, r := range task.Pairs {
		if r.Chosen == r.Rejected {
			t.Fatal("a pair with identical answers")
		}
	}
	q := Question{3, 4}
	for resp, want := range map[string]bool{" 7": true, " 7 apples": true, " 8": false, "": false, " seven": false, " -7": false} {
		if q.Correct(resp) != want {
			t.Errorf("Correct(%q) = %v", resp, !want)
		}
	}
	again, _ := Make(DefaultOptions)
	if !slices.Equal(again.SFT, task.SFT) {
		t.Error("the task is not deterministic in its seed")
	}
}
