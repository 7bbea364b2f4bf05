package data

import (
	"reflect"
	"strings"
	"testing"
)

func TestRewardText(t *testing.T) {
	for _, c := range []struct {
		prompt, answer, end, want string
	}{
		{"\n\nHuman: Hi\n\nAssistant:", " Hello.", DefaultEndText, "\n\nHuman: Hi\n\nAssistant: Hello.<|endoftext|>"},
		{" Human: 2+2? Assistant:", " 4", "", " Human: 2+2? Assistant: 4"},
		{"\n\nHuman: Hi\n\nAssistant:", "", DefaultEndText, "\n\nHuman: Hi\n\nAssistant:<|endoftext|>"},
		{"", " x", "</s>", " x</s>"},
	} {
		if got := RewardText(c.prompt, c.answer, c.end); got != c.want {
			t.Errorf("RewardText(%q, %q, %q) = %q, want %q", c.prompt, c.answer, c.end, got, c.want)
		}
	}
}

// seamTok is byteTok with one merge across a seam, as OPT's BPE merges "."
// and "<" into ".<": encoding texts separately and joining the ids differs
// from encoding the joined text.
type seamTok struct{}

const seamID = 300

func (seamTok) Encode(s string) []int32 {
	ids := []int32{tBOS}
	for i := 0; i < len(s); i++ {
		if strings.HasPrefix(s[i:], ".<") {
			ids = append(ids, seamID)
			i++
			continue
		}
		ids = append(ids, int32(s[i])+3)
	}
	return ids
}

// TestRewardPairIsRewardText checks that phase 2 tokenizes each sequence of
// a pair as one text, RewardText of the sample's full text and EndText.
func TestRewardPairIsRewardText(t *testing.T) {
	var tok seamTok
	for _, c := range []struct {
		name string
		s    Sample
		end  string
	}{
		{"rm-static", Sample{Prompt: "\n\nHuman: Hi\n\nAssistant:", Chosen: " Hello.", Rejected: " Go away.",
			PromptChosen: "\n\nHuman: Hi\n\nAssistant: Hello.", PromptRejected: "\n\nHuman: Hi\n\nAssistant: Go away."}, DefaultEndText},
		{"no end text", Sample{Prompt: "P:", Chosen: " a.", Rejected: " b", PromptChosen: "P: a.", PromptRejected: "P: b"}, ""},
		// yitingxie/rlhf-reward-datasets: the full texts are the raw
		// prompt+response, and Chosen is only the text after the last
		// "Assistant:"; step 2 uses the full texts.
		{"full text differs", Sample{Prompt: "Human: q Assistant:", Chosen: " yes.", Rejected: " no.",
			PromptChosen: "Human: q Assistant: hm. Assistant: yes.", PromptRejected: "Human: q Assistant: hm. Assistant: no."}, DefaultEndText},
	} {
		o := Options{MaxSeqLen: 1000, EndText: c.end, EOS: tEOS, PAD: tPAD, Tokenizer: tok}
		ex, keep, err := NewExample(c.s, PhaseReward, o)
		if err != nil || !keep {
			t.Fatalf("%s: %v %v", c.name, keep, err)
		}
		if want := tok.Encode(RewardText(c.s.PromptChosen, "", c.end)); !reflect.DeepEqual(ex.IDs, want) {
			t.Errorf("%s: chosen %v, want %v", c.name, ex.IDs, want)
		}
		if want := tok.Encode(RewardText(c.s.PromptRejected, "", c.end)); !reflect.DeepEqual(ex.Rejected, want) {
			t.Errorf("%s: rejected %v, want %v", c.name, ex.Rejected, want)
		}
		// For Prompt+Chosen samples that is RewardText(Prompt, Chosen, end),
		// and not the ids of the parts joined.
		if c.s.PromptChosen == c.s.Prompt+c.s.Chosen {
			if want := tok.Encode(RewardText(c.s.Prompt, c.s.Chosen, c.end)); !reflect.DeepEqual(ex.IDs, want) {
				t.Errorf("%s: chosen %v, want RewardText(Prompt, Chosen) %v", c.name, ex.IDs, want)
			}
			joined := append(tok.Encode(c.s.PromptChosen), tok.Encode(c.end)[1:]...)
			if strings.HasSuffix(c.s.Chosen, ".") && strings.HasPrefix(c.end, "<") && reflect.DeepEqual(ex.IDs, joined) {
				t.Errorf("%s: chosen %v equals the joined ids of the parts; the seam should merge", c.name, ex.IDs)
			}
		}
	}
}
