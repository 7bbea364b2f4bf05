package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/tokenizer"
)

// ScoreOptions are the options of `gochat score`.
type ScoreOptions struct {
	g         *Globals
	Model     string
	Tokenizer string
	Revision  string
	Prompt    string
	Answers   []string
	EndText   string
	DType     string
	JSON      bool
	// ChatTemplate is --chat-template (bindChatTemplate).
	ChatTemplate string
}

func newScoreCmd(g *Globals, runF func(*ScoreOptions) error) *cobra.Command {
	opts := &ScoreOptions{g: g}
	cmd := &cobra.Command{
		Use:   "score --model REWARD_DIR|HUB_ID --prompt TEXT --answer TEXT [--answer TEXT ...]",
		Short: "Score answers to a prompt with a reward model (step 2's output)",
		Long: `Score answers with a reward model, as DeepSpeed-Chat's rw_eval.py does: each
answer is appended to the prompt, followed by --end-text, and the text is
tokenized as one (reward.Sequence: the sequences step 2 trains on and step 3
scores); the score is the value head's output at the last token. With a chat
template (--chat-template; auto: the tokenizer's, when it has one) the prompt
is parsed into its Human/Assistant turns and each answer scored as the
conversation plus that answer rendered by the template, as step 2 trains on
it (no --end-text). A model without a trained value head (score.weight, or
DeepSpeed-Chat's v_head.weight) is refused.
Higher is better; only differences between answers to the same prompt are
meaningful. Prints one "score<TAB>answer" line per answer, or with --json
one object {"prompt", "answers", "scores", "ids"}, where ids[i] are the
token ids answer i was scored on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Model == "" {
				return usageErrorf("--model is required")
			}
			if len(opts.Answers) == 0 {
				return usageErrorf("give at least one --answer")
			}
			if runF != nil {
				return runF(opts)
			}
			return runScore(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Model, "model", "", "reward model (config.json + weights with a value head): a directory or a Hub id")
	bindDType(f, &opts.DType)
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "tokenizer directory or Hub id (default: --model)")
	f.StringVar(&opts.Revision, "revision", "", "Hub revision (branch, tag or commit) of a model named by Hub id (default main)")
	f.StringVar(&opts.Prompt, "prompt", "", `prompt text, e.g. "\n\nHuman: ...\n\nAssistant:"`)
	f.StringArrayVar(&opts.Answers, "answer", nil, "an answer to score (repeat the flag for several)")
	f.StringVar(&opts.EndText, "end-text", data.DefaultEndText, "text appended to each answer, as in step 2 (\"\" for none)")
	f.BoolVar(&opts.JSON, "json", false, "print one JSON object")
	bindChatTemplate(f, &opts.ChatTemplate)
	return cmd
}

func runScore(opts *ScoreOptions) error {
	dev, err := newDevice(opts.g)
	if err != nil {
		return err
	}
	dt, err := resolveDType(opts.g, opts.DType, dev)
	if err != nil {
		return err
	}
	modelDir, tokDir, err := resolveModelTokenizer(opts.g, opts.Model, opts.Tokenizer, opts.Revision)
	if err != nil {
		return err
	}
	m, err := model.Load(dev, modelDir, model.LoadOptions{ValueHead: "require", DType: dt})
	if errors.Is(err, model.ErrNoValueHead) {
		return usageErrorf("--model %s has no value head (score.weight or v_head.weight): it is not a reward model, and its scores would mean nothing; score with a step-2 output (gochat reward)", opts.Model)
	}
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return err
	}
	cf, err := resolveChatTemplate(opts.ChatTemplate, tokDir, tok)
	if err != nil {
		return err
	}
	seqs := make([][]int32, len(opts.Answers))
	for i, a := range opts.Answers {
		if cf == nil {
			seqs[i] = reward.Sequence(tok, opts.Prompt, a, opts.EndText)
			continue
		}
		if seqs[i], err = templatedReply(cf, tok, opts.Prompt, a); err != nil {
			return err
		}
	}
	scores, err := reward.Score(m, seqs, 16)
	if err != nil {
		return fmt.Errorf("score with %s: %w", opts.Model, err)
	}
	if opts.JSON {
		return json.NewEncoder(opts.g.Out).Encode(map[string]any{"prompt": opts.Prompt, "answers": opts.Answers, "scores": scores, "ids": seqs})
	}
	for i, a := range opts.Answers {
		if _, err := fmt.Fprintf(opts.g.Out, "%.4f\t%q\n", scores[i], a); err != nil {
			return err
		}
	}
	return nil
}

// templatedReply is the token sequence step 2 trains a reward model on
// with a chat template: the conversation of a DeepSpeed-Chat prompt plus
// the answer as the assistant's message, rendered and tokenized without
// the tokenizer's own special tokens (as apply_chat_template does).
func templatedReply(cf *data.ChatFormat, tok *tokenizer.Tokenizer, prompt, answer string) ([]int32, error) {
	msgs, err := data.Conversation(prompt)
	if err != nil {
		return nil, usageErrorf("--prompt: %v", err)
	}
	text, err := cf.Reply(msgs, data.Answer(answer))
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %w", err)
	}
	return tok.Encode(text, false), nil
}

// templatedPrompt is the token sequence step 3 generates from with a chat
// template: the conversation of a DeepSpeed-Chat prompt (or plain text as
// one user message) rendered with the generation prompt, tokenized without
// the tokenizer's own special tokens.
func templatedPrompt(cf *data.ChatFormat, tok *tokenizer.Tokenizer, prompt string) ([]int32, error) {
	msgs, err := data.Conversation(prompt)
	if err != nil {
		return nil, usageErrorf("--prompt: %v", err)
	}
	text, err := cf.Prompt(msgs)
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %w", err)
	}
	return tok.Encode(text, false), nil
}
