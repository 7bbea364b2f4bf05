package data

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gochat-ai/gochat/chattemplate"
)

// DeepSpeed-Chat's conversation markers (Sample.Prompt).
const (
	humanTurn     = "\n\nHuman:"
	assistantTurn = "\n\nAssistant:"
	shortHuman    = " Human: "
	shortAsst     = " Assistant:"
)

// Conversation parses a DeepSpeed-Chat prompt (Sample.Prompt) into the chat
// messages before the answer:
//
//	"\n\nHuman: q1\n\nAssistant: a1\n\nHuman: q2\n\nAssistant:"
//	    -> [{user q1} {assistant a1} {user q2}]
//	" Human: q Assistant:"   -> [{user q}]   (webgpt, SHP, synthetic-instruct)
//	" text" or "text"        -> [{user text}] (no markers: local/jsonfile, generic files)
//
// A turn's content is the text between its marker and the next one, less
// the one space that follows the marker by the convention; nothing else is
// trimmed. In the "\n\n" form the prompt must start with "\n\nHuman:", end
// with "\n\nAssistant:" (the answer's turn, left open) and alternate Human
// and Assistant turns; anything else is an error saying what is wrong.
func Conversation(prompt string) ([]chattemplate.Message, error) {
	hasLong := strings.Contains(prompt, humanTurn) || strings.Contains(prompt, assistantTurn)
	switch {
	case !hasLong && strings.HasPrefix(prompt, shortHuman) && strings.HasSuffix(prompt, shortAsst) &&
		len(prompt) >= len(shortHuman)+len(shortAsst):
		return []chattemplate.Message{{Role: "user", Content: prompt[len(shortHuman) : len(prompt)-len(shortAsst)]}}, nil
	case !hasLong && !strings.HasPrefix(prompt, strings.TrimRight(shortHuman, " ")) && !strings.HasSuffix(prompt, shortAsst):
		return []chattemplate.Message{{Role: "user", Content: strings.TrimPrefix(prompt, " ")}}, nil
	case !hasLong:
		return nil, errors.New(`prompt has a " Human:" or " Assistant:" marker but is not " Human: ... Assistant:"`)
	case !strings.HasPrefix(prompt, humanTurn):
		return nil, errors.New(`prompt does not start with "\n\nHuman:"`)
	case !strings.HasSuffix(prompt, assistantTurn):
		return nil, errors.New(`prompt does not end with "\n\nAssistant:" (the answer's turn)`)
	}
	body := prompt[:len(prompt)-len(assistantTurn)]
	var msgs []chattemplate.Message
	role, pos := "user", len(humanTurn)
	for {
		rest := body[pos:]
		h, a := strings.Index(rest, humanTurn), strings.Index(rest, assistantTurn)
		next, nextRole, mark := -1, "", ""
		switch {
		case h >= 0 && (a < 0 || h < a):
			next, nextRole, mark = h, "user", humanTurn
		case a >= 0:
			next, nextRole, mark = a, "assistant", assistantTurn
		}
		content := rest
		if next >= 0 {
			content = rest[:next]
		}
		msgs = append(msgs, chattemplate.Message{Role: role, Content: strings.TrimPrefix(content, " ")})
		if next < 0 {
			break
		}
		if nextRole == role {
			return nil, fmt.Errorf("prompt has two %s turns in a row (turn %d)", turnName(role), len(msgs)+1)
		}
		role, pos = nextRole, pos+next+len(mark)
	}
	if role != "user" {
		return nil, fmt.Errorf("prompt has two Assistant turns in a row (turn %d)", len(msgs)+1)
	}
	return msgs, nil
}

func turnName(role string) string {
	if role == "user" {
		return "Human"
	}
	return "Assistant"
}

// Answer is a response (Sample.Chosen, Rejected) as the content of the
// final assistant message: without the one leading space of the
// convention.
func Answer(response string) string { return strings.TrimPrefix(response, " ") }

// ChatFormat renders samples as chat conversations with a model's chat
// template (Options.Chat), as transformers' apply_chat_template renders
// them:
//
//	phase 1   Render(conversation + chosen answer); the loss on the
//	          assistant messages' text (chattemplate.AssistantSpans)
//	phase 2   Render(conversation + chosen answer) and the same with the
//	          rejected answer; no end text is appended (the template ends
//	          the turn)
//	phase 3   Render(conversation, add_generation_prompt=true)
//
// The rendered text is tokenized without the tokenizer's own special
// tokens, as apply_chat_template(tokenize=True) does (add_special_tokens=
// False): a template that wants BOS writes it (Llama-2/3 do; TinyLlama's
// zephyr template and Qwen's do not, and get none).
type ChatFormat struct {
	Template *chattemplate.Template
	// Lead is what the template writes at the start of an assistant
	// message after what its generation prompt writes:
	// "<think>\n\n</think>\n\n" for Qwen3's last turn (its generation
	// prompt is "<|im_start|>assistant\n"), "" for most (TinyLlama, Qwen2.5,
	// Llama-3). A generated answer that starts with it is that text
	// followed by the message's content (ReplyContent).
	Lead string
	// End is what the template writes after an assistant message's content:
	// its end of turn ("<|im_end|>\n" for Qwen, "</s>\n" for TinyLlama).
	End string
}

// probe messages NewChatFormat renders.
const (
	probeQuestion = "What is 2+2?"
	probeAnswer   = "2+2 is 4."
)

// NewChatFormat finds t's Lead and End by rendering a one-question
// exchange with and without the answer. A template that cannot render a
// user message followed by an assistant message, or does not write the
// assistant's content, is an error.
func NewChatFormat(t *chattemplate.Template) (*ChatFormat, error) {
	q := []chattemplate.Message{{Role: "user", Content: probeQuestion}}
	p, err := t.Render(q, chattemplate.Options{AddGenerationPrompt: true})
	if err != nil {
		return nil, fmt.Errorf("the chat template cannot render a user message with the generation prompt: %w", err)
	}
	f, err := t.Render(append(q, chattemplate.Message{Role: "assistant", Content: probeAnswer}), chattemplate.Options{})
	if err != nil {
		return nil, fmt.Errorf("the chat template cannot render a user message and an answer: %w", err)
	}
	i := strings.LastIndex(f, probeAnswer)
	if i < 0 {
		return nil, fmt.Errorf("the chat template does not write the assistant's message (%q rendered as %q)", probeAnswer, f)
	}
	cf := &ChatFormat{Template: t, End: f[i+len(probeAnswer):]}
	if strings.HasPrefix(f, p) && len(p) <= i {
		cf.Lead = f[len(p):i]
	}
	return cf, nil
}

// Digest identifies the template for caches and run fingerprints.
func (f *ChatFormat) Digest() string { return f.Template.Digest() }

// Prompt renders a conversation with the generation prompt: step 3's
// prompt text.
func (f *ChatFormat) Prompt(msgs []chattemplate.Message) (string, error) {
	return f.Template.Render(msgs, chattemplate.Options{AddGenerationPrompt: true})
}

// Reply renders a conversation followed by an assistant message with
// content answer: step 2's sequences, and what step 3's reward model
// scores (with ReplyContent of the generated text).
func (f *ChatFormat) Reply(msgs []chattemplate.Message, answer string) (string, error) {
	all := append(msgs[:len(msgs):len(msgs)], chattemplate.Message{Role: "assistant", Content: answer})
	return f.Template.Render(all, chattemplate.Options{})
}

// ReplyContent is the content of the assistant message that a model's
// generated text (decoded, its end-of-turn token removed) stands for: the
// text without the template's Lead, which the model generates after the
// generation prompt because step 1 trained it to (the lead is inside the
// loss span) and which Reply writes again.
func (f *ChatFormat) ReplyContent(generated string) string {
	return strings.TrimPrefix(generated, f.Lead)
}

// SFT renders a conversation and its answer for step 1 and finds the byte
// spans of the assistant messages (chattemplate.AssistantSpans: each
// message's text with the template's end of turn, without the generation
// prompt). Where the template renders earlier assistant turns differently
// once later turns follow (Qwen3 drops their <think> blocks), their spans
// cannot be found by rendering prefixes; then only the last turn, the
// answer, is a span (lastOnly), found the same way: its text is what the
// whole conversation adds to the conversation before it with the
// generation prompt. When even that is not a prefix, the error says so.
func (f *ChatFormat) SFT(msgs []chattemplate.Message, answer string) (text string, spans [][2]int, lastOnly bool, err error) {
	all := append(msgs[:len(msgs):len(msgs)], chattemplate.Message{Role: "assistant", Content: answer})
	text, sp, err := f.Template.AssistantSpans(all, chattemplate.Options{})
	var se *chattemplate.SpanError
	switch {
	case errors.As(err, &se):
		if text, err = f.Template.Render(all, chattemplate.Options{}); err != nil {
			return "", nil, false, err
		}
		p, err := f.Prompt(msgs)
		if err != nil {
			return "", nil, false, err
		}
		if !strings.HasPrefix(text, p) {
			return "", nil, false, fmt.Errorf("the chat template renders the conversation before the answer, with the generation prompt, as no prefix of the whole conversation: the answer's tokens cannot be located (%v)", se)
		}
		return text, [][2]int{{len(p), len(text)}}, true, nil
	case err != nil:
		return "", nil, false, err
	}
	for _, s := range sp {
		if s.Start < s.End {
			spans = append(spans, [2]int{s.Start, s.End})
		}
	}
	return text, spans, false, nil
}
