package reward

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/tokenizer"
)

// sharedData is the shared data directory beside the checkout (../shared).
var sharedData = filepath.Join("..", "..", "shared", "data")

// needShared skips the test when path (under ../shared) is absent, or fails
// it when the environment variable CI is set: CI checks out ../shared beside
// the repository, so there a missing file is a broken checkout.
func needShared(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("shared test data not found at %s, and CI is set (CI checks out ../shared beside the repository): %v", path, err)
		}
		t.Skipf("shared test data not found at %s (the shared data directory beside the checkout): %v", path, err)
	}
}

var (
	optOnce sync.Once
	optTok  *tokenizer.Tokenizer
	optErr  error
)

// loadOPT loads the real OPT tokenizer of the shared data, once.
func loadOPT(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	dir := filepath.Join(sharedData, "opt-tokenizer")
	needShared(t, dir)
	optOnce.Do(func() { optTok, optErr = tokenizer.Load(dir) })
	if optErr != nil {
		t.Fatal(optErr)
	}
	return optTok
}

// stepTwoTok is the tokenizer step 2 gives the data package: Encode with
// the template (BOS), as internal/cli's data tokenizer does.
type stepTwoTok struct{ t *tokenizer.Tokenizer }

func (d stepTwoTok) Encode(s string) []int32 { return d.t.Encode(s, true) }

const (
	optEOS = 2 // </s>
	optPAD = 1 // <pad>
)

// seqCase is a prompt with an answer; most answers end where BPE merges
// across the seam with the end text.
type seqCase struct {
	name, prompt, answer string
}

var seqCases = []seqCase{
	{"period", "\n\nHuman: What is the capital of France?\n\nAssistant:", " Paris."},
	{"exclamation", "\n\nHuman: Say hi.\n\nAssistant:", " Hi there!"},
	{"no punctuation", "\n\nHuman: Name a colour\n\nAssistant:", " blue"},
	{"newline", "\n\nHuman: Two lines?\n\nAssistant:", " one\ntwo\n"},
	{"unicode", "\n\nHuman: Café?\n\nAssistant:", " Oui, un café 🙂."},
	// Special tokens in the text: "</s>" in the prompt, "<pad>" in the
	// answer (in an answer, "</s>" is EOS and ends it).
	{"special text", "\n\nHuman: What do </s> and <pad> do?\n\nAssistant:", " <pad> pads."},
	{"empty answer", "\n\nHuman: Anything?\n\nAssistant:", ""},
	{"human prefix", " Human: 2+2? Assistant:", " 4."},
}

// TestSequenceMatchesStep2Data builds phase-2 pairs through the real data
// builder (a JSON lines file in the Dahoas/rm-static layout, data.Build with
// the OPT tokenizer) and checks that Sequence gives exactly the chosen and
// rejected sequences step 2 trains on.
func TestSequenceMatchesStep2Data(t *testing.T) {
	tok := loadOPT(t)
	dir := t.TempDir()
	var lines []string
	for i, c := range seqCases {
		// The rejected answer of row i is the chosen answer of row i+1.
		rej := seqCases[(i+1)%len(seqCases)].answer
		b, err := json.Marshal(map[string]string{"prompt": c.prompt, "response": c.answer, "chosen": c.answer, "rejected": rej})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	path := filepath.Join(dir, "train.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{data.DefaultEndText, ""} {
		ds, err := data.Resolve(path, data.ResolveOptions{Adapter: "Dahoas/rm-static"})
		if err != nil {
			t.Fatal(err)
		}
		set, err := data.Build(ds, data.Train, data.PhaseReward, data.Options{
			Split: data.Split{0, 1, 0}, Seed: 1234, MaxSeqLen: 512, EndText: end,
			EOS: optEOS, PAD: optPAD, Tokenizer: stepTwoTok{tok},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(set.Examples) != len(seqCases) {
			t.Fatalf("end text %q: %d phase-2 examples, want %d", end, len(set.Examples), len(seqCases))
		}
		for _, ex := range set.Examples {
			c := seqCases[ex.Row]
			rej := seqCases[(int(ex.Row)+1)%len(seqCases)].answer
			if got := Sequence(tok, c.prompt, c.answer, end); !slices.Equal(got, ex.IDs) {
				t.Errorf("%s, end text %q: Sequence (chosen)\n %v\nstep-2 chosen\n %v", c.name, end, got, ex.IDs)
			}
			if got := Sequence(tok, c.prompt, rej, end); !slices.Equal(got, ex.Rejected) {
				t.Errorf("%s, end text %q: Sequence (rejected)\n %v\nstep-2 rejected\n %v", c.name, end, got, ex.Rejected)
			}
		}
	}
}

// TestSequenceMatchesStep2Sample does the same on the 24 hh-rlhf rows of
// ../shared/data/rm-static-sample, through data.Load.
func TestSequenceMatchesStep2Sample(t *testing.T) {
	tok := loadOPT(t)
	path := filepath.Join(sharedData, "rm-static-sample", "sample.jsonl")
	needShared(t, path)
	a, _ := data.Lookup("Dahoas/rm-static")
	samples, err := data.ReadSamples(path, a)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.Resolve(path, data.ResolveOptions{Adapter: "Dahoas/rm-static"})
	if err != nil {
		t.Fatal(err)
	}
	set, err := data.Build(ds, data.Train, data.PhaseReward, data.Options{
		Split: data.Split{0, 1, 0}, Seed: 1234, MaxSeqLen: 1 << 20, EndText: data.DefaultEndText,
		EOS: optEOS, PAD: optPAD, Tokenizer: stepTwoTok{tok},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Examples) != len(samples) {
		t.Fatalf("%d phase-2 examples, want %d", len(set.Examples), len(samples))
	}
	for _, ex := range set.Examples {
		s := samples[ex.Row]
		if got := Sequence(tok, s.Prompt, s.Chosen, data.DefaultEndText); !slices.Equal(got, ex.IDs) {
			t.Errorf("row %d: Sequence (chosen) differs from step 2's sequence\n %v\n %v", ex.Row, got, ex.IDs)
		}
		if got := Sequence(tok, s.Prompt, s.Rejected, data.DefaultEndText); !slices.Equal(got, ex.Rejected) {
			t.Errorf("row %d: Sequence (rejected) differs from step 2's sequence\n %v\n %v", ex.Row, got, ex.Rejected)
		}
	}
}

// byteIDs returns the ids of text spelled one byte-level symbol per byte: a
// valid but non-canonical encoding, as a sampling model may produce.
func byteIDs(t *testing.T, tok *tokenizer.Tokenizer, text string) []int32 {
	t.Helper()
	// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
	// others for 256, 257, ... in byte order.
	var sym [256]rune
	n := 0
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			sym[b] = rune(b)
		} else {
			sym[b] = rune(256 + n)
			n++
		}
	}
	var ids []int32
	for i := 0; i < len(text); i++ {
		id, ok := tok.TokenID(string(sym[text[i]]))
		if !ok {
			t.Fatalf("no token for byte %#x", text[i])
		}
		ids = append(ids, id)
	}
	return ids
}

// TestSequenceFromIDs checks that the ids step 3 has (the prompt as phase
// 3 encodes it, with BOS; a generated answer, with or without its EOS, in
// the canonical or a byte-by-byte spelling) score the same sequence as the
// texts do.
func TestSequenceFromIDs(t *testing.T) {
	tok := loadOPT(t)
	for _, c := range seqCases {
		for _, end := range []string{data.DefaultEndText, ""} {
			want := Sequence(tok, c.prompt, c.answer, end)
			prompt := tok.Encode(c.prompt, true)
			ans := tok.Encode(c.answer, false)
			for _, v := range []struct {
				name   string
				answer []int32
			}{
				{"answer ids", ans},
				{"answer ids + EOS", append(slices.Clone(ans), optEOS)},
				{"answer ids + EOS + padding", append(slices.Clone(ans), optEOS, optPAD, optPAD)},
				{"answer one byte a token + EOS", append(byteIDs(t, tok, c.answer), optEOS)},
			} {
				got, err := SequenceFromIDs(tok, prompt, v.answer, optEOS, end)
				if err != nil {
					t.Fatalf("%s, %s: %v", c.name, v.name, err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s, %s, end text %q:\n got %v\nwant %v", c.name, v.name, end, got, want)
				}
			}
			// Prompt ids without BOS are accepted as well.
			got, err := SequenceFromIDs(tok, tok.Encode(c.prompt, false), ans, optEOS, end)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("%s, prompt without BOS: %v, %v, want %v", c.name, got, err, want)
			}
		}
	}
}

// TestIDConcatenationDiffers shows why scoring goes through text: joining
// separately tokenized ids (what demoEval and step 3 did: prompt ids +
// answer ids + Encode(end text)) is not what step 2 trains on. GPT-2's
// pre-tokenizer takes ".<|" as one piece, and BPE merges ".<" into one
// token (49069), so with the joint text the reward model never sees the
// "." (4) and "<" (41552) tokens that concatenation puts at the seam: the
// score would be of a sequence unlike any in step 2's data.
func TestIDConcatenationDiffers(t *testing.T) {
	tok := loadOPT(t)
	for _, c := range []struct {
		name, prompt, answer string
		differs              bool
	}{
		{"period", "\n\nHuman: What is the capital of France?\n\nAssistant:", " Paris.", true},
		{"period after unicode", "\n\nHuman: Café?\n\nAssistant:", " Oui, un café 🙂.", true},
		{"human prefix", " Human: 2+2? Assistant:", " 4.", true},
		// "!<" and "?<" are not merges of GPT-2's BPE; the seam is harmless
		// there, and a letter before "<" is a separate pre-token.
		{"exclamation", "\n\nHuman: Say hi.\n\nAssistant:", " Hi there!", false},
		{"no punctuation", "\n\nHuman: Name a colour\n\nAssistant:", " blue", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			prompt, ans := tok.Encode(c.prompt, true), tok.Encode(c.answer, false)
			old := slices.Concat(prompt, ans, tok.Encode(data.DefaultEndText, false))
			seq := Sequence(tok, c.prompt, c.answer, data.DefaultEndText)
			if got := !slices.Equal(old, seq); got != c.differs {
				t.Fatalf("concatenated ids differ from Sequence: %v, want %v\nconcatenated %v\nSequence     %v", got, c.differs, old, seq)
			}
			if !c.differs {
				return
			}
			// They differ exactly at the seam: "." + "<" against ".<".
			n := len(prompt) + len(ans) - 1
			if !slices.Equal(old[:n], seq[:n]) || old[n] != 4 || old[n+1] != 41552 || seq[n] != 49069 || len(old) != len(seq)+1 {
				t.Errorf("seam: concatenated %v, Sequence %v; want \".\"(4) \"<\"(41552) against \".<\"(49069) at %d", old, seq, n)
			}
			fromIDs, err := SequenceFromIDs(tok, prompt, append(slices.Clone(ans), optEOS), optEOS, data.DefaultEndText)
			if err != nil || !slices.Equal(fromIDs, seq) {
				t.Errorf("SequenceFromIDs = %v, %v; want %v", fromIDs, err, seq)
			}
		})
	}
}

// TestSequenceFromIDsInvalidUTF8 covers answers whose bytes are not valid
// UTF-8 (a generation cut inside a multi-byte character, or bytes in a bad
// order): they are scored as the text Decode shows, each ill-formed part
// replaced by U+FFFD, nothing dropped and no error.
func TestSequenceFromIDsInvalidUTF8(t *testing.T) {
	tok := loadOPT(t)
	const prompt = "\n\nHuman: Smile?\n\nAssistant:"
	emoji := byteIDs(t, tok, " 🙂") // bytes 20 F0 9F 99 82
	for _, c := range []struct {
		name   string
		answer []int32
		text   string // the text scored
	}{
		{"whole character", emoji, " 🙂"},
		{"cut after 1 of 4 bytes", emoji[:2], " \uFFFD"},
		{"cut after 3 of 4 bytes", emoji[:4], " \uFFFD"},
		{"cut, then EOS", append(slices.Clone(emoji[:3]), optEOS), " \uFFFD"},
		{"cut, then text", slices.Concat(emoji[:3], tok.Encode(" ok.", false)), " \uFFFD ok."},
		{"continuation bytes first", slices.Concat(emoji[3:], emoji[:1]), "\uFFFD\uFFFD "},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := SequenceFromIDs(tok, tok.Encode(prompt, true), c.answer, optEOS, data.DefaultEndText)
			if err != nil {
				t.Fatal(err)
			}
			if want := Sequence(tok, prompt, c.text, data.DefaultEndText); !slices.Equal(got, want) {
				t.Errorf("got %v\nwant %v (the text %q)", got, want, c.text)
			}
			text, err := tok.Decode(got, false)
			if err != nil || text != "</s>"+prompt+c.text+data.DefaultEndText {
				t.Errorf("scored text %q, %v; want %q", text, err, "</s>"+prompt+c.text+data.DefaultEndText)
			}
		})
	}
}

// TestSequenceFromIDsErrors: an id with no text is an error, not a silent
// drop.
func TestSequenceFromIDsErrors(t *testing.T) {
	tok := loadOPT(t)
	prompt := tok.Encode("\n\nHuman: hi\n\nAssistant:", true)
	for _, c := range []struct {
		name           string
		prompt, answer []int32
	}{
		{"answer id in the model's padded vocabulary", prompt, []int32{2201, 50270}},
		{"negative answer id", prompt, []int32{-1}},
		{"prompt id outside the vocabulary", append(slices.Clone(prompt), 50265), []int32{2201}},
	} {
		if _, err := SequenceFromIDs(tok, c.prompt, c.answer, optEOS, data.DefaultEndText); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestScoreSequences scores Sequence, SequenceFromIDs and the old id
// concatenation with a small random OPT reward model over the real
// vocabulary: the first two are the same sequence and score the same; the
// concatenation is another sequence with another score.
func TestScoreSequences(t *testing.T) {
	tok := loadOPT(t)
	cfg, err := model.ParseConfig([]byte(`{"model_type": "opt", "vocab_size": 50272, "hidden_size": 16, "ffn_dim": 32,
 "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64, "word_embed_proj_dim": 16,
 "do_layer_norm_before": true, "dropout": 0.0, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(dev, cfg, model.Options{ValueHead: true})
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(7, 0.5)
	const promptText, answer = "\n\nHuman: What is the capital of France?\n\nAssistant:", " Paris."
	prompt, ans := tok.Encode(promptText, true), tok.Encode(answer, false)
	seq := Sequence(tok, promptText, answer, data.DefaultEndText)
	fromIDs, err := SequenceFromIDs(tok, prompt, append(slices.Clone(ans), optEOS), optEOS, data.DefaultEndText)
	if err != nil {
		t.Fatal(err)
	}
	old := slices.Concat(prompt, ans, tok.Encode(data.DefaultEndText, false))
	scores, err := Score(m, [][]int32{seq, fromIDs, old}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if scores[0] != scores[1] {
		t.Errorf("Sequence scores %v, SequenceFromIDs %v; want equal", scores[0], scores[1])
	}
	if scores[0] == scores[2] {
		t.Errorf("the concatenated ids score %v, the same as Sequence: the test model does not tell the sequences apart", scores[2])
	}
}
