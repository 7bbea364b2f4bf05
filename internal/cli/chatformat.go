package cli

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/pflag"

	"github.com/gochat-ai/gochat/chattemplate"
	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/tokenizer"
)

// The --chat-template values besides a FILE.
const (
	chatAuto = "auto"
	chatNone = "none"
)

// bindChatTemplate adds --chat-template.
func bindChatTemplate(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "chat-template", chatAuto, `chat format: auto (the tokenizer's chat template when it has one, else DeepSpeed-Chat's "\n\nHuman: ...\n\nAssistant:" text), none (that text always) or FILE (a Jinja chat template, rendered as transformers' apply_chat_template)`)
}

// chatTemplateFile is the name a directory gochat saves gives the FILE of
// --chat-template, so that the model keeps the format it was trained on
// (transformers reads it before tokenizer_config.json's chat_template).
const chatTemplateFile = "chat_template.jinja"

// resolveChatTemplate resolves --chat-template for the tokenizer tok read
// from tokDir: nil means DeepSpeed-Chat's text. auto uses the directory's
// template (chattemplate.Load) when it has one; FILE is a Jinja template
// that sees the tokenizer's special tokens (bos_token, eos_token, ...).
func resolveChatTemplate(flag, tokDir string, tok *tokenizer.Tokenizer) (*data.ChatFormat, error) {
	var t *chattemplate.Template
	switch flag {
	case chatNone:
		return nil, nil
	case chatAuto, "":
		var err error
		t, err = chattemplate.Load(tokDir)
		if errors.Is(err, chattemplate.ErrNoTemplate) || errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("--chat-template auto: %w", err)
		}
	default:
		src, err := os.ReadFile(flag)
		if err != nil {
			return nil, usageErrorf("--chat-template: %v (want auto, none or a Jinja template file)", err)
		}
		special := map[string]string{}
		for _, name := range []string{"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"} {
			if s, _, ok := tok.SpecialToken(name); ok {
				special[name] = s
			}
		}
		if t, err = chattemplate.New(string(src), special); err != nil {
			return nil, usageErrorf("--chat-template %s: %v", flag, err)
		}
	}
	cf, err := data.NewChatFormat(t)
	if err != nil {
		where := flag
		if flag == chatAuto || flag == "" {
			where = "auto (" + t.Path() + ")"
		}
		return nil, usageErrorf("--chat-template %s: %v", where, err)
	}
	return cf, nil
}

// chatName names a resolved chat format in messages.
func chatName(flag string, cf *data.ChatFormat) string {
	if flag == chatAuto || flag == "" {
		return cf.Template.Path()
	}
	return flag
}

// saveChatTemplate writes a --chat-template FILE into a directory gochat
// saved (chat_template.jinja); with auto the copied tokenizer files carry
// the template already.
func saveChatTemplate(dir, flag string, cf *data.ChatFormat) error {
	if cf == nil || flag == chatAuto || flag == "" || flag == chatNone {
		return nil
	}
	return writeFileAtomic(filepath.Join(dir, chatTemplateFile), []byte(cf.Template.Source("default")))
}

// stopIDs are the ids that end a generated answer besides the model's
// EOS: the tokenizer's (tokenizer.EOSIDs: EOS and generation_config.json's
// eos_token_id list) and, with a chat template, the first special token of
// its end of turn (<|im_end|> for Qwen, <|eot_id|> for Llama-3; </s> for
// TinyLlama, its EOS). An end of turn without a special token (a FILE
// template ending turns with "\n") stops nothing: the answer runs to EOS.
func stopIDs(tok *tokenizer.Tokenizer, cf *data.ChatFormat) []int32 {
	ids := slices.Clone(tok.EOSIDs())
	if cf != nil {
		for _, id := range tok.Encode(cf.End, false) {
			if tok.IsSpecial(id) {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
				break
			}
		}
	}
	return ids
}

// cutAtStop returns ids up to the first id stop reports (excluded).
func cutAtStop(ids []int32, stop func(int32) bool) []int32 {
	if i := slices.IndexFunc(ids, stop); i >= 0 {
		return ids[:i]
	}
	return ids
}

// idsKey is a map key for a token sequence.
func idsKey(ids []int32) string {
	b := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(id))
	}
	return string(b)
}

// chatReward is what step 3's reward model scores with a chat template:
// the conversation of the prompt (found by its ids among the step-3
// examples) followed by the generated answer, cut at its first stop token
// and decoded, as the assistant's message — rendered and tokenized as step
// 2 rendered its pairs (data.ChatFormat.Reply; the template's lead, which
// the actor generates after the generation prompt, is not written twice).
type chatReward struct {
	tok   *tokenizer.Tokenizer
	cf    *data.ChatFormat
	convs map[string][]chattemplate.Message
	stop  func(int32) bool
}

func newChatReward(tok *tokenizer.Tokenizer, cf *data.ChatFormat, prompts []data.Example, stop func(int32) bool) *chatReward {
	r := &chatReward{tok: tok, cf: cf, convs: make(map[string][]chattemplate.Message, len(prompts)), stop: stop}
	for _, ex := range prompts {
		r.convs[idsKey(ex.IDs)] = ex.Messages
	}
	return r
}

// texts are the prompt as rendered and the answer's text (what
// --print-answers shows).
func (r *chatReward) texts(prompt, answer []int32) (string, string, error) {
	p, err := r.tok.Decode(prompt, false)
	if err != nil {
		return "", "", fmt.Errorf("prompt: %w", err)
	}
	a, err := r.tok.Decode(cutAtStop(answer, r.stop), false)
	if err != nil {
		return "", "", fmt.Errorf("answer: %w", err)
	}
	return p, a, nil
}

// sequence is the reward model's input for an answer to a prompt (ids,
// without padding).
func (r *chatReward) sequence(prompt, answer []int32) ([]int32, error) {
	msgs, ok := r.convs[idsKey(prompt)]
	if !ok {
		return nil, fmt.Errorf("chat template: the prompt is not one of the step-3 prompts")
	}
	_, a, err := r.texts(nil, answer)
	if err != nil {
		return nil, err
	}
	text, err := r.cf.Reply(msgs, r.cf.ReplyContent(a))
	if err != nil {
		return nil, err
	}
	return r.tok.Encode(text, false), nil
}
