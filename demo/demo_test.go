package demo

import (
	"math"
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
	parse := func(prompt string) Question {
		q, ok := ParsePrompt(prompt)
		if !ok || q.Prompt() != prompt {
			t.Fatalf("ParsePrompt(%q) = %v, %v", prompt, q, ok)
		}
		return q
	}
	// The SFT data's habit: most carry answers lose their tens digit, other
	// answers are mostly right.
	var carry, dropped, other, right int
	for _, r := range task.SFT {
		q := parse(r.Prompt)
		switch {
		case q.Carry():
			carry++
			if r.Chosen == dropCarry(q) {
				dropped++
			}
		default:
			other++
			if q.Correct(r.Chosen) {
				right++
			}
		}
	}
	if f := float64(dropped) / float64(carry); math.Abs(f-DefaultOptions.DropCarry) > 0.07 {
		t.Errorf("%.2f of SFT carry answers drop the carry, want about %.2f", f, DefaultOptions.DropCarry)
	}
	if f := float64(right) / float64(other); math.Abs(f-(1-DefaultOptions.OffBy)) > 0.05 {
		t.Errorf("%.2f of other SFT answers are right, want about %.2f", f, 1-DefaultOptions.OffBy)
	}
	// Pairs prefer the right answer to the carry mistake (or its mirror).
	for _, r := range task.Pairs {
		q := parse(r.Prompt)
		if !q.Correct(r.Chosen) || q.Correct(r.Rejected) {
			t.Fatalf("pair %+v: want a right chosen and a wrong rejected answer", r)
		}
		if want := map[bool]string{true: dropCarry(q), false: spuriousCarry(q)}[q.Carry()]; r.Rejected != want {
			t.Fatalf("pair %+v: rejected %q, want the carry mistake %q", r, r.Rejected, want)
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

func TestParsePrompt(t *testing.T) {
	for _, c := range []struct {
		in string
		q  Question
		ok bool
	}{
		{Question{7, 5}.Prompt(), Question{7, 5}, true},
		{"\n\nHuman: What is 1+2?\n\nAssistant: 3\n\nHuman: What is 4+4?\n\nAssistant:", Question{4, 4}, true},
		{"\n\nHuman: Hello\n\nAssistant:", Question{}, false},
		{"", Question{}, false},
	} {
		if q, ok := ParsePrompt(c.in); q != c.q || ok != c.ok {
			t.Errorf("ParsePrompt(%q) = %v, %v; want %v, %v", c.in, q, ok, c.q, c.ok)
		}
	}
}
