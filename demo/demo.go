// Package demo makes gochat's self-contained demo task: addition questions
// whose answers an exact checker can grade, a byte-level tokenizer for them,
// and the data of the three steps.
//
// The SFT data is imperfect in a systematic way, like a careless annotator:
// in most answers to questions with a carry (a+b ≥ 10) the tens digit is
// dropped ("7+5 = 2"), and a few other answers are off by one to three. A
// model fine-tuned on it learns the habit and repeats it on questions it
// never saw. The preference pairs always prefer the right answer, against
// the annotator's mistakes and their mirror image (a spurious tens digit on
// a question without a carry), so the reward model learns what the SFT data
// gets wrong; step 3 fixes the habit, and because it is a habit rather than
// a fact about one question, the fix carries over to held-out questions,
// which the exact checker measures.
package demo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// Question is one addition problem.
type Question struct{ A, B int }

// Prompt is the question in the Human/Assistant format of DeepSpeed-Chat's
// data (REFERENCE.md §3).
func (q Question) Prompt() string {
	return fmt.Sprintf("\n\nHuman: What is %d+%d?\n\nAssistant:", q.A, q.B)
}

// Answer is the correct response text (responses start with a space).
func (q Question) Answer() string { return fmt.Sprintf(" %d", q.A+q.B) }

var number = regexp.MustCompile(`-?\d+`)

var question = regexp.MustCompile(`Human: What is (\d+)\+(\d+)\?`)

// ParsePrompt finds the question in a prompt made by Prompt (the last one,
// for a multi-turn prompt); ok is false when there is none.
func ParsePrompt(prompt string) (q Question, ok bool) {
	ms := question.FindAllStringSubmatch(prompt, -1)
	if len(ms) == 0 {
		return Question{}, false
	}
	m := ms[len(ms)-1]
	a, err1 := strconv.Atoi(m[1])
	b, err2 := strconv.Atoi(m[2])
	return Question{a, b}, err1 == nil && err2 == nil
}

// Correct is the exact checker: the first integer of the response equals
// the sum.
func (q Question) Correct(response string) bool {
	m := number.FindString(response)
	if m == "" {
		return false
	}
	v, err := strconv.Atoi(m)
	return err == nil && v == q.A+q.B
}

// offBy1to3 returns a wrong answer off by 1 to 3.
func offBy1to3(q Question, rng *rand.Rand) string {
	d := 1 + rng.IntN(3)
	if rng.IntN(2) == 0 {
		d = -d
	}
	return fmt.Sprintf(" %d", q.A+q.B+d)
}

// Carry reports whether the sum has a carry into the tens (a+b ≥ 10 for
// single-digit operands).
func (q Question) Carry() bool { return q.A%10+q.B%10 >= 10 }

// dropCarry is the annotator's habit: the sum without its tens digit
// (a+b−10 for a carry question).
func dropCarry(q Question) string {
	return fmt.Sprintf(" %d", q.A+q.B-10)
}

// spuriousCarry is the habit's mirror image: a tens digit too many on a
// question without a carry.
func spuriousCarry(q Question) string {
	return fmt.Sprintf(" %d", q.A+q.B+10)
}

// rejected returns the rejected answer of a preference pair: the carry
// mistake the SFT data makes (or its mirror image), or with probability
// offBy an answer off by one to three.
func rejected(q Question, offBy float64, rng *rand.Rand) string {
	if rng.Float64() < offBy {
		return offBy1to3(q, rng)
	}
	if q.Carry() {
		return dropCarry(q)
	}
	return spuriousCarry(q)
}

// Options size the task.
type Options struct {
	Seed    uint64
	Max     int // operands are in [0, Max), Max ≤ 10
	SFT     int // SFT examples
	Pairs   int // reward-model pairs
	Prompts int // PPO prompts
	Eval    int // held-out evaluation prompts
	// DropCarry is the fraction of SFT answers to carry questions that
	// drop the tens digit; OffBy the fraction of the other SFT answers that
	// are off by one to three. PairOffBy is the fraction of preference
	// pairs whose rejected answer is off by one to three rather than the
	// carry mistake.
	DropCarry, OffBy, PairOffBy float64
}

// DefaultOptions is the size the demo recipe uses.
var DefaultOptions = Options{Seed: 1, Max: 10, SFT: 1000, Pairs: 3000, Prompts: 512, Eval: 20, DropCarry: 0.6, OffBy: 0.1, PairOffBy: 0}

// Row is one line of the generated JSON-lines files (the generic
// prompt/chosen/rejected columns).
type Row struct {
	Prompt   string `json:"prompt"`
	Chosen   string `json:"chosen"`
	Rejected string `json:"rejected"`
}

// Task is the generated data: every question appears in exactly one part.
type Task struct {
	SFT, Pairs, Prompts, Eval []Row
	EvalQuestions             []Question
}

// Make generates the task. Questions are drawn without replacement across
// the parts while the operand space allows, so the evaluation prompts are
// never seen in training; with more requested rows than distinct questions
// the training parts repeat questions but never evaluation ones.
func Make(o Options) (*Task, error) {
	if o.Max < 1 || o.Max > 10 {
		return nil, fmt.Errorf("demo: Max %d: operands are single digits (1 ≤ Max ≤ 10)", o.Max)
	}
	total := o.Max * o.Max
	if o.Eval >= total {
		return nil, fmt.Errorf("demo: %d evaluation questions need more than %d distinct ones (raise Max)", o.Eval, total)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0xde30))
	perm := rng.Perm(total)
	q := func(i int) Question { return Question{perm[i] / o.Max, perm[i] % o.Max} }
	t := &Task{}
	for i := range o.Eval {
		qq := q(i)
		t.EvalQuestions = append(t.EvalQuestions, qq)
		t.Eval = append(t.Eval, Row{qq.Prompt(), qq.Answer(), rejected(qq, o.PairOffBy, rng)})
	}
	train := total - o.Eval
	next := 0
	draw := func() Question { qq := q(o.Eval + next%train); next++; return qq }
	for range o.SFT {
		qq := draw()
		ans := qq.Answer()
		switch u := rng.Float64(); {
		case qq.Carry() && u < o.DropCarry:
			ans = dropCarry(qq)
		case u >= 1-o.OffBy:
			ans = offBy1to3(qq, rng)
		}
		t.SFT = append(t.SFT, Row{qq.Prompt(), ans, rejected(qq, o.PairOffBy, rng)})
	}
	for range o.Pairs {
		qq := draw()
		t.Pairs = append(t.Pairs, Row{qq.Prompt(), qq.Answer(), rejected(qq, o.PairOffBy, rng)})
	}
	for range o.Prompts {
		qq := draw()
		t.Prompts = append(t.Prompts, Row{qq.Prompt(), qq.Answer(), rejected(qq, o.PairOffBy, rng)})
	}
	return t, nil
}

// Write stores the parts as dataset folders in dir, split the way
// gochat's data reader finds splits: sft/{train,test}.jsonl,
// pairs/{train,test}.jsonl (test: a tenth held out for the step's
// evaluation), prompts/train.jsonl, and eval/test.jsonl (the held-out
// prompts of the final evaluation).
func (t *Task) Write(dir string) error {
	cut := func(rows []Row) ([]Row, []Row) { n := len(rows) - len(rows)/10; return rows[:n], rows[n:] }
	sftTrain, sftTest := cut(t.SFT)
	pairTrain, pairTest := cut(t.Pairs)
	files := map[string][]Row{
		"sft/train.jsonl": sftTrain, "sft/test.jsonl": sftTest,
		"pairs/train.jsonl": pairTrain, "pairs/test.jsonl": pairTest,
		"prompts/train.jsonl": t.Prompts, "eval/test.jsonl": t.Eval,
	}
	for name, rows := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		var b []byte
		for _, r := range rows {
			line, _ := json.Marshal(r)
			b = append(append(b, line...), '\n')
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}

// WriteTokenizer writes a byte-level tokenizer in the facebook/opt-* file
// layout: vocab.json with OPT's four special tokens (<s>=0, <pad>=1,
// </s>=2, <unk>=3) followed by the 256 byte symbols, merges.txt with no
// merges (every byte is a token), and tokenizer_config.json with
// add_bos_token. Its vocabulary is 260 tokens.
func WriteTokenizer(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	vocab := map[string]int{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
	n := 0
	for b := 0; b < 256; b++ {
		var r rune
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			r = rune(b)
		} else {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = 4 + b
	}
	files := map[string]any{
		"vocab.json": vocab,
		"tokenizer_config.json": map[string]any{"add_bos_token": true, "bos_token": "</s>", "eos_token": "</s>",
			"unk_token": "</s>", "pad_token": "<pad>"},
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "merges.txt"), []byte("#version: 0.2\n"), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// VocabSize is the size of the demo tokenizer's vocabulary.
const VocabSize = 260

// ModelConfig is the config.json of the demo's actor and reward model: a
// tiny pre-LN OPT over the byte-level vocabulary.
const ModelConfig = `{"model_type": "opt", "vocab_size": 260, "hidden_size": 128, "ffn_dim": 512,
 "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 64,
 "do_layer_norm_before": true, "dropout": 0.0, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}`

// LlamaModelConfig is the demo's model in the LLaMA family's shape, with
// about OPT's parameters: RMSNorm, rotary positions, grouped-query
// attention (4 query heads sharing 2 key/value heads), a SwiGLU MLP of
// 2/3 of OPT's width (the same weights per layer), tied embeddings.
const LlamaModelConfig = `{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 260,
 "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "hidden_act": "silu", "tie_word_embeddings": true, "attention_bias": false, "mlp_bias": false,
 "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}`

// ModelConfigFor returns the demo model's config.json for an
// architecture: "" or "opt" (ModelConfig), "llama" (LlamaModelConfig).
func ModelConfigFor(arch string) (string, error) {
	switch arch {
	case "", "opt":
		return ModelConfig, nil
	case "llama":
		return LlamaModelConfig, nil
	}
	return "", fmt.Errorf("the demo has no %q architecture (want opt or llama)", arch)
}
