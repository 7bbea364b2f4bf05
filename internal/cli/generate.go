package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/tokenizer"
)

// GenerateOptions are the options of `gochat generate`.
type GenerateOptions struct {
	g         *Globals
	Model     string
	Tokenizer string
	// ChatTemplate renders --prompt as a conversation (none: the text as
	// it is).
	ChatTemplate string
	Revision     string
	PromptIDs    string
	Prompt       string
	MaxNewTokens int
	DType        string
	Sample       model.SampleOptions
	JSON         bool
	ids          []int32
}

func newGenerateCmd(g *Globals, runF func(*GenerateOptions) error) *cobra.Command {
	opts := &GenerateOptions{g: g}
	var greedy bool
	cmd := &cobra.Command{
		Use:   "generate --model DIR|HUB_ID (--prompt-ids 2,100,200 | --prompt TEXT)",
		Short: "Continue a prompt with a model (KV-cache decoding)",
		Long: `Continue a prompt with a Hugging Face model directory. Greedy decoding is the
default; --temperature, --top-k or --top-p switch to sampling (seeded by --seed).
Generation stops at the config's eos_token_id or after --max-new-tokens.
--prompt is tokenized with the model directory's tokenizer (or --tokenizer),
BOS added as the tokenizer does, and the continuation is printed as text.
With --json it prints {"prompt_ids":[...],"tokens":[...],"logprobs":[...]}
(plus "text" with --prompt) where logprobs[i] is the natural-log probability
of tokens[i] under the full softmax at temperature 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Model == "" {
				return usageErrorf("--model is required")
			}
			if (opts.PromptIDs == "") == (opts.Prompt == "") {
				return usageErrorf("give exactly one of --prompt-ids and --prompt")
			}
			if opts.PromptIDs != "" {
				ids, err := parseIDs(opts.PromptIDs)
				if err != nil {
					return usageError{err}
				}
				opts.ids = ids
			}
			if opts.MaxNewTokens < 1 {
				return usageErrorf("--max-new-tokens must be >= 1")
			}
			sampling := samplingChanged(cmd.Flags())
			if greedy && sampling {
				return usageErrorf("--greedy cannot be combined with --temperature, --top-k or --top-p")
			}
			opts.Sample.Greedy = !sampling
			if err := opts.Sample.Validate(); err != nil {
				return usageError{err}
			}
			if runF != nil {
				return runF(opts)
			}
			return runGenerate(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Model, "model", "", "model: a Hugging Face directory (config.json + weights), a Hub id or a short form (1.3b)")
	f.StringVar(&opts.Revision, "revision", "", "Hub revision (branch, tag or commit) of a model named by Hub id (default main)")
	bindDType(f, &opts.DType)
	f.StringVar(&opts.PromptIDs, "prompt-ids", "", "comma-separated prompt token ids")
	f.StringVar(&opts.Prompt, "prompt", "", "prompt text (tokenized with the model's tokenizer)")
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "tokenizer directory or Hub id for --prompt (default: --model)")
	f.StringVar(&opts.ChatTemplate, "chat-template", chatNone, `with --prompt: none (continue the text as it is, as a text-generation pipeline does), auto (render it as a conversation with the model's chat template and its generation prompt: DeepSpeed-Chat's "\n\nHuman: ...\n\nAssistant:" turns, or plain text as one user message) or FILE (a Jinja chat template)`)
	f.IntVar(&opts.MaxNewTokens, "max-new-tokens", 32, "most tokens to generate")
	f.BoolVar(&greedy, "greedy", false, "pick the most likely token (the default)")
	bindSampleFlags(f, &opts.Sample)
	f.BoolVar(&opts.JSON, "json", false, "print one JSON object")
	return cmd
}

func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--prompt-ids: %q is not a token id", p)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

func runGenerate(opts *GenerateOptions) error {
	dev, err := newDevice(opts.g)
	if err != nil {
		return err
	}
	dt, err := resolveDType(opts.g, opts.DType, dev)
	if err != nil {
		return err
	}
	modelDir, err := resolveModel(opts.g, opts.Model, opts.Revision)
	if err != nil {
		return err
	}
	m, err := model.Load(dev, modelDir, model.LoadOptions{ValueHead: "no", DType: dt})
	if err != nil {
		return err
	}
	var tok *tokenizer.Tokenizer
	if opts.Prompt != "" {
		tokDir := modelDir
		if opts.Tokenizer != "" {
			if tokDir, err = resolveModel(opts.g, opts.Tokenizer, opts.Revision); err != nil {
				return err
			}
		}
		if tok, err = tokenizer.Load(tokDir); err != nil {
			return err
		}
		cf, err := resolveChatTemplate(opts.ChatTemplate, tokDir, tok)
		if err != nil {
			return err
		}
		if opts.ChatTemplate != chatNone && cf == nil {
			return usageErrorf("--chat-template %s: the tokenizer in %s has no chat template", opts.ChatTemplate, tokDir)
		}
		if cf == nil {
			opts.ids = tok.Encode(opts.Prompt, true)
		} else if opts.ids, err = templatedPrompt(cf, tok, opts.Prompt); err != nil {
			return err
		}
	}
	for _, id := range opts.ids {
		if int(id) >= m.Config.VocabSize {
			return usageErrorf("--prompt-ids: %d is outside the vocabulary (%d)", id, m.Config.VocabSize)
		}
	}
	if room := m.Config.MaxPositions - len(opts.ids); room < 1 {
		return usageErrorf("the prompt has %d tokens, the model takes at most %d positions", len(opts.ids), m.Config.MaxPositions)
	} else if opts.MaxNewTokens > room {
		fmt.Fprintf(opts.g.Err, "gochat: --max-new-tokens %d does not fit after a %d-token prompt in the model's %d positions; generating at most %d\n",
			opts.MaxNewTokens, len(opts.ids), m.Config.MaxPositions, room)
		opts.MaxNewTokens = room
	}
	s, err := model.NewSampler(opts.Sample)
	if err != nil {
		return usageError{err}
	}
	gens, err := m.Generate([][]int32{opts.ids}, opts.MaxNewTokens, s)
	if err != nil {
		return err
	}
	gen := gens[0]
	res := map[string]any{"prompt_ids": opts.ids, "tokens": gen.Tokens, "logprobs": gen.LogProbs}
	if tok != nil {
		text, err := tok.Decode(gen.Tokens, true)
		if err != nil {
			return err
		}
		if !opts.JSON {
			_, err = fmt.Fprintln(opts.g.Out, text)
			return err
		}
		res["text"] = text
	}
	if opts.JSON {
		return json.NewEncoder(opts.g.Out).Encode(res)
	}
	parts := make([]string, len(gen.Tokens))
	for i, t := range gen.Tokens {
		parts[i] = strconv.Itoa(int(t))
	}
	_, err = fmt.Fprintln(opts.g.Out, strings.Join(parts, ","))
	return err
}

// bindSampleFlags binds --temperature, --top-k, --top-p and --seed. Greedy
// decoding is the default; giving any of the first three switches to
// sampling (see samplingChanged).
func bindSampleFlags(f *pflag.FlagSet, o *model.SampleOptions) {
	f.Float64Var(&o.Temperature, "temperature", 1, "sampling temperature (default: greedy decoding)")
	f.IntVar(&o.TopK, "top-k", 0, "sample from the K most likely tokens (0 = all)")
	f.Float64Var(&o.TopP, "top-p", 1, "sample from the smallest set with this probability mass")
	f.Uint64Var(&o.Seed, "seed", 0, "sampling seed")
}

// samplingChanged reports whether a sampling flag was given.
func samplingChanged(f *pflag.FlagSet) bool {
	return f.Changed("temperature") || f.Changed("top-k") || f.Changed("top-p")
}
