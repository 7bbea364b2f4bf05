package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/tokenizer"
)

// TokenizeOptions are the options of `gochat tokenize`.
type TokenizeOptions struct {
	g           *Globals
	Tokenizer   string
	Text        string
	HasText     bool // --text was given (it may be empty)
	NoBOS       bool
	Decode      bool
	SkipSpecial bool
	ids         []int32 // --decode --text: the ids to decode
}

func newTokenizeCmd(g *Globals, runF func(*TokenizeOptions) error) *cobra.Command {
	opts := &TokenizeOptions{g: g}
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer DIR [--text TEXT] [--no-bos] [--decode]",
		Short: "Turn text into token ids, or ids into text, with a Hugging Face tokenizer",
		Long: `Tokenize with the tokenizer of a Hugging Face model directory (tokenizer.json,
or vocab.json + merges.txt with tokenizer_config.json), giving the ids Hugging
Face gives. The special tokens of the tokenizer's template are added (for OPT:
BOS </s> = 2 in front) unless --no-bos is given.

With --text it prints the ids of TEXT, comma-separated (the form --prompt-ids
of gochat generate takes). Without --text it reads JSON lines {"text": "..."}
from stdin and writes one line {"ids": [...]} per input line, in order, encoding
on --threads cores. A bad line stops it with an error naming the line; the
lines before it are written.

With --decode it goes the other way: --text takes comma-separated ids and the
text is printed, or stdin has lines {"ids": [...]} and each gets a line
{"text": "..."}. --skip-special leaves special tokens out of the text.`,
		Example: `  gochat tokenize --tokenizer ../opt-125m --text "Hello, my name is"
  echo '{"text": "\n\nHuman: Hi"}' | gochat tokenize --tokenizer ../opt-125m --no-bos
  gochat tokenize --tokenizer ../opt-125m --decode --text 2,31414,6`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Tokenizer == "" {
				return usageErrorf("--tokenizer is required")
			}
			opts.HasText = cmd.Flags().Changed("text")
			if opts.SkipSpecial && !opts.Decode {
				return usageErrorf("--skip-special only applies to --decode")
			}
			if opts.NoBOS && opts.Decode {
				return usageErrorf("--no-bos only applies to encoding, not --decode")
			}
			if opts.Decode && opts.HasText {
				ids, err := parseTokenIDs(opts.Text)
				if err != nil {
					return usageError{fmt.Errorf("--text with --decode: %w", err)}
				}
				opts.ids = ids
			}
			if runF != nil {
				return runF(opts)
			}
			return runTokenize(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "Hugging Face model or tokenizer directory, or a model's Hub id")
	f.StringVar(&opts.Text, "text", "", "text to encode (with --decode: comma-separated ids); without it, JSON lines are read from stdin")
	f.BoolVar(&opts.NoBOS, "no-bos", false, "do not add the template's special tokens (OPT: the BOS </s>)")
	f.BoolVar(&opts.Decode, "decode", false, "turn ids into text")
	f.BoolVar(&opts.SkipSpecial, "skip-special", false, "with --decode, leave special tokens out")
	return cmd
}

// parseTokenIDs reads comma-separated token ids ("" is none).
func parseTokenIDs(s string) ([]int32, error) {
	ids := []int32{}
	if strings.TrimSpace(s) == "" {
		return ids, nil
	}
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a token id", p)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

func runTokenize(opts *TokenizeOptions) error {
	dir, err := resolveModel(opts.g, opts.Tokenizer, "")
	if err != nil {
		return err
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(opts.g.Out, 1<<16)
	switch {
	case opts.HasText && opts.Decode:
		text, err := tk.Decode(opts.ids, opts.SkipSpecial)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, text)
	case opts.HasText:
		b := appendIDs(nil, tk.Encode(opts.Text, !opts.NoBOS), ",")
		w.Write(append(b, '\n'))
	case opts.Decode:
		err = decodeLines(opts.g.In, w, tk, opts.SkipSpecial)
	default:
		err = encodeLines(opts.g.In, w, tk, !opts.NoBOS, opts.g.Threads)
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Stdin is encoded in batches of this many lines or bytes, each batch on
// all threads, so memory stays bounded on large inputs.
const (
	tokenizeBatchLines = 4096
	tokenizeBatchBytes = 8 << 20
)

// encodeLines reads {"text": ...} lines from r and writes {"ids": [...]}
// lines to w in the same order.
func encodeLines(r io.Reader, w *bufio.Writer, tk *tokenizer.Tokenizer, addSpecial bool, threads int) error {
	lr := newLineReader(r)
	var texts []string
	var out []byte
	for {
		texts = texts[:0]
		size := 0
		var lineErr error
		for len(texts) < tokenizeBatchLines && size < tokenizeBatchBytes {
			line, n, err := lr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			var in struct {
				Text *string `json:"text"`
			}
			if lineErr = parseLine(line, n, &in); lineErr == nil && in.Text == nil {
				lineErr = fmt.Errorf(`stdin line %d: no "text" field, want {"text": "..."}`, n)
			}
			if lineErr != nil {
				break
			}
			texts = append(texts, *in.Text)
			size += len(*in.Text)
		}
		for _, ids := range tk.EncodeBatch(texts, addSpecial, threads) {
			out = append(appendIDs(append(out[:0], `{"ids":[`...), ids, ","), "]}\n"...)
			if _, err := w.Write(out); err != nil {
				return err
			}
		}
		if lineErr != nil || lr.done {
			return lineErr
		}
	}
}

// decodeLines reads {"ids": [...]} lines from r and writes {"text": ...}
// lines to w.
func decodeLines(r io.Reader, w *bufio.Writer, tk *tokenizer.Tokenizer, skipSpecial bool) error {
	lr := newLineReader(r)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for {
		line, n, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var in struct {
			IDs *[]int32 `json:"ids"`
		}
		if err := parseLine(line, n, &in); err != nil {
			return err
		}
		if in.IDs == nil {
			return fmt.Errorf(`stdin line %d: no "ids" field, want {"ids": [...]}`, n)
		}
		text, err := tk.Decode(*in.IDs, skipSpecial)
		if err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		if err := enc.Encode(struct {
			Text string `json:"text"`
		}{text}); err != nil {
			return err
		}
	}
}

// parseLine decodes one JSON line into v; errors name the line.
func parseLine(line []byte, n int, v any) error {
	switch {
	case len(bytes.TrimSpace(line)) == 0:
		return fmt.Errorf("stdin line %d: empty line, want a JSON object", n)
	case !utf8.Valid(line):
		return fmt.Errorf("stdin line %d: invalid UTF-8", n)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("stdin line %d: %w", n, err)
	}
	return nil
}

// lineReader reads lines of any length, without their "\n" or "\r\n".
type lineReader struct {
	r    *bufio.Reader
	n    int  // lines read
	done bool // EOF reached
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{r: bufio.NewReaderSize(r, 1<<16)} }

// next returns the next line and its 1-based number, or io.EOF.
func (l *lineReader) next() ([]byte, int, error) {
	if l.done {
		return nil, l.n, io.EOF
	}
	line, err := l.r.ReadBytes('\n')
	if errors.Is(err, io.EOF) {
		l.done = true
		if len(line) == 0 {
			return nil, l.n, io.EOF
		}
	} else if err != nil {
		return nil, l.n, fmt.Errorf("reading stdin: %w", err)
	}
	l.n++
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'})
	return line, l.n, nil
}

// appendIDs appends ids to b separated by sep.
func appendIDs(b []byte, ids []int32, sep string) []byte {
	for i, id := range ids {
		if i > 0 {
			b = append(b, sep...)
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return b
}
