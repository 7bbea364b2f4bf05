package cli

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/chattemplate"
	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/tokenizer"
)

// ChatOptions are the options of `gochat chat`.
type ChatOptions struct {
	g            *Globals
	Model        string
	Tokenizer    string
	Revision     string
	MaxNewTokens int
	DType        string
	ChatTemplate string
	Sample       model.SampleOptions
}

func newChatCmd(g *Globals, runF func(*ChatOptions) error) *cobra.Command {
	opts := &ChatOptions{g: g}
	cmd := &cobra.Command{
		Use:   "chat --model DIR|HUB_ID",
		Short: "Talk with a model, turn by turn, in its chat template or the Human:/Assistant: format",
		Long: `Multi-turn chat with a model in the format it was trained on. With a chat
template (--chat-template auto, the default, when the tokenizer has one; or
FILE) the conversation is a list of messages rendered with the template and its
generation prompt, and an answer stops at EOS or the template's end of turn
(<|im_end|>, <|eot_id|>). Without one (OPT, or --chat-template none) it is
DeepSpeed-Chat's "\n\nHuman: <your line>\n\nAssistant:" text, and an answer stops
at EOS or where the model starts the next "Human:" turn. Answers stream token
by token; when the conversation outgrows the model, its oldest turns are
dropped. Type "clear" to forget the conversation, "quit" (or end the input) to
leave. Reads lines from a terminal or a pipe; on a pipe only the answers are
printed, one per line (newlines inside an answer become spaces).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Model == "" {
				return usageErrorf("--model is required")
			}
			if opts.MaxNewTokens < 1 {
				return usageErrorf("--max-new-tokens must be >= 1")
			}
			opts.Sample.Greedy = !samplingChanged(cmd.Flags())
			if err := opts.Sample.Validate(); err != nil {
				return usageError{err}
			}
			if runF != nil {
				return runF(opts)
			}
			return runChat(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Model, "model", "", "model: a Hugging Face model directory, a Hub id or a short form (1.3b)")
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "tokenizer directory or Hub id (default: --model)")
	f.StringVar(&opts.Revision, "revision", "", "Hub revision (branch, tag or commit) of a model named by Hub id (default main)")
	f.IntVar(&opts.MaxNewTokens, "max-new-tokens", 128, "most tokens per answer")
	bindDType(f, &opts.DType)
	bindChatTemplate(f, &opts.ChatTemplate)
	bindSampleFlags(f, &opts.Sample)
	return cmd
}

// turnEnd is where a model begins the next human turn.
const turnEnd = "\n\nHuman:"

func runChat(opts *ChatOptions) error {
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
	m, err := model.Load(dev, modelDir, model.LoadOptions{ValueHead: "no", DType: dt})
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return err
	}
	chat, err := resolveChatTemplate(opts.ChatTemplate, tokDir, tok)
	if err != nil {
		return err
	}
	// Answers get at most half the model's positions, so that a turn
	// always has room for the conversation so far.
	if most := m.Config.MaxPositions / 2; opts.MaxNewTokens > most {
		fmt.Fprintf(opts.g.Err, "gochat: --max-new-tokens %d is more than half of the model's %d positions; answers are capped at %d tokens\n",
			opts.MaxNewTokens, m.Config.MaxPositions, most)
		opts.MaxNewTokens = most
	}
	var conv chatConversation = &textConversation{tok: tok}
	stops := []int32{int32(m.Config.EOSTokenID)}
	if chat != nil {
		conv = &templateConversation{tok: tok, cf: chat}
		stops = append(stops, stopIDs(tok, chat)...)
	}
	limit := m.Config.MaxPositions - opts.MaxNewTokens
	interactive := isTerminal(opts.g.Out)
	out := bufio.NewWriter(opts.g.Out)
	defer out.Flush()
	in := bufio.NewScanner(opts.g.In)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for {
		if interactive {
			fmt.Fprint(out, "Human: ")
			out.Flush()
		}
		if !in.Scan() {
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		switch line {
		case "":
			continue
		case "quit", "exit":
			return nil
		case "clear":
			conv.clear()
			continue
		}
		ids, err := conv.ask(line, limit)
		if err != nil {
			return err
		}
		s, err := model.NewSampler(opts.Sample)
		if err != nil {
			return err
		}
		if interactive {
			fmt.Fprint(out, "Assistant:")
		}
		emit := func(seg string) { // a pipe gets one line per answer
			if !interactive {
				seg = strings.ReplaceAll(seg, "\n", " ")
			}
			fmt.Fprint(out, seg)
		}
		cut := conv.turnEnd()
		var answer []int32
		shown := 0 // bytes of the answer already printed
		text := ""
		_, err = m.GenerateStream([][]int32{ids}, opts.MaxNewTokens, s, func(_ int, t int32) bool {
			if slices.Contains(stops, t) {
				return false
			}
			answer = append(answer, t)
			text, _ = tok.Decode(answer, true)
			if i := strings.Index(text, cut); cut != "" && i >= 0 {
				text = text[:i]
				return false
			}
			// Print what is complete: hold back a partial UTF-8 character
			// and anything that could be the start of the next turn.
			end := len(text)
			for end > shown && !utf8.ValidString(text[shown:end]) {
				end--
			}
			if j := strings.LastIndex(text[:end], "\n"); cut != "" && j >= shown && strings.HasPrefix(cut, text[j:end]) {
				end = j
			}
			if end > shown {
				emit(text[shown:end])
				out.Flush()
				shown = end
			}
			return true
		})
		if err != nil {
			return err
		}
		text = strings.TrimRight(text, "\n")
		if len(text) > shown {
			emit(text[shown:])
		}
		fmt.Fprintln(out)
		out.Flush()
		conv.answer(text)
	}
}

// chatConversation is the conversation `gochat chat` holds: DeepSpeed-Chat's
// text or a chat template's messages.
type chatConversation interface {
	// ask adds the user's line and returns the prompt's ids, at most limit.
	ask(line string, limit int) ([]int32, error)
	// answer adds the model's answer.
	answer(text string)
	clear()
	// turnEnd is text that ends an answer where the model starts the
	// user's next turn ("" for none).
	turnEnd() string
}

// textConversation is DeepSpeed-Chat's "\n\nHuman: ...\n\nAssistant:" text.
type textConversation struct {
	tok     *tokenizer.Tokenizer
	history string
}

func (c *textConversation) ask(line string, limit int) ([]int32, error) {
	c.history += "\n\nHuman: " + line + "\n\nAssistant:"
	ids := c.tok.Encode(c.history, true)
	// Keep the most recent tokens that leave room for the answer.
	if len(ids) > limit {
		ids = append(ids[:1:1], ids[len(ids)-limit+1:]...)
	}
	return ids, nil
}

func (c *textConversation) answer(text string) { c.history += text }
func (c *textConversation) clear()             { c.history = "" }
func (c *textConversation) turnEnd() string    { return turnEnd }

// templateConversation is a list of messages rendered with a chat
// template and its generation prompt, tokenized as apply_chat_template
// tokenizes (no added BOS). The answer ends at the template's end of turn
// (stopIDs).
type templateConversation struct {
	tok  *tokenizer.Tokenizer
	cf   *data.ChatFormat
	msgs []chattemplate.Message
}

func (c *templateConversation) ask(line string, limit int) ([]int32, error) {
	c.msgs = append(c.msgs, chattemplate.Message{Role: "user", Content: line})
	for {
		text, err := c.cf.Prompt(c.msgs)
		if err != nil {
			c.msgs = c.msgs[:len(c.msgs)-1]
			return nil, err
		}
		ids := c.tok.Encode(text, false)
		if len(ids) <= limit {
			return ids, nil
		}
		if len(c.msgs) < 3 {
			// One question longer than the room left: its last tokens.
			return ids[len(ids)-limit:], nil
		}
		c.msgs = c.msgs[2:] // forget the oldest exchange
	}
}

func (c *templateConversation) answer(text string) {
	c.msgs = append(c.msgs, chattemplate.Message{Role: "assistant", Content: c.cf.ReplyContent(text)})
}
func (c *templateConversation) clear()          { c.msgs = nil }
func (c *templateConversation) turnEnd() string { return "" }
