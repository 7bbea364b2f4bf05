package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/tokenizer"
)

// DataInspectOptions are the options of `gochat data inspect`.
type DataInspectOptions struct {
	g       *Globals
	Dataset string // registry name or path
	// Revision is the Hub revision of a dataset named by Hub id.
	Revision string
	// Tokenizer is a Hugging Face model or tokenizer directory or Hub id;
	// "" skips token statistics.
	Tokenizer       string
	DataSplit       string
	Seed            uint32
	MaxSeqLen       int
	MaxPromptSeqLen int
	AddEOTToken     bool
	EndText         string
	Adapter         string
	Columns         data.ColumnMap
	Examples        int
	ChatTemplate    string
	split           data.Split
}

func newDataCmd(g *Globals, runF func(*DataInspectOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Look at RLHF datasets the way training will read them",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDataInspectCmd(g, runF))
	return cmd
}

func newDataInspectCmd(g *Globals, runF func(*DataInspectOptions) error) *cobra.Command {
	opts := &DataInspectOptions{g: g}
	cmd := &cobra.Command{
		Use:   "inspect NAME|PATH [--tokenizer DIR|HUB_ID] [--data-split 2,4,4] [--seed N]",
		Short: "Show a dataset's schema, phase split, dropped rows, token lengths and examples",
		Long: `Read a dataset the way the three training phases will and report: its files and
schema, the rows each phase gets from --data-split (train and eval parts), how
many rows are dropped and why (empty: a null cell the phase needs; malformed: a
cell of the wrong type, invalid UTF-8, a missing key; too long: a phase-3 prompt
over --max-prompt-seq-len), token-length percentiles, and the first examples of
every phase.

NAME is a Hub id, such as a DeepSpeed-Chat dataset name (` + strings.Join(data.Names(), ", ") + `),
found in the Hugging Face hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub) and downloaded into it when absent (its Parquet
files; HF_HUB_OFFLINE=1 forbids it). PATH is a .parquet, .json or .jsonl file or a folder
of them (splits from the file names: train-00000-of-00001.parquet, test.jsonl).
A path whose name contains a registered dataset name uses its adapter, as
DeepSpeed-Chat does; --adapter forces one; other files use the column mapping.

Without --tokenizer nothing is tokenized: token lengths, too-long prompts and
truncated sequences are not reported. With a tokenizer that has a chat template
(--chat-template auto, the default; or FILE) the phases are built as the
training commands build them with it: rendered conversations, rows that are no
conversation counted as dropped.`,
		Example: `  gochat data inspect Dahoas/rm-static --tokenizer ../opt-125m
  gochat data inspect ../shared/data/rm-static-sample/sample.parquet --adapter Dahoas/rm-static
  gochat data inspect pairs.jsonl --prompt-column question --chosen-column good --rejected-column bad`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dataset = args[0]
			sp, err := data.ParseSplit(opts.DataSplit)
			if err != nil {
				return usageErrorf("--data-split: %v", err)
			}
			if len(sp) != 3 {
				return usageErrorf("--data-split %q: want three parts (phases 1, 2, 3)", opts.DataSplit)
			}
			opts.split = sp
			if opts.MaxSeqLen < 1 || opts.MaxPromptSeqLen < 1 {
				return usageErrorf("--max-seq-len and --max-prompt-seq-len must be >= 1")
			}
			if opts.Examples < 0 {
				return usageErrorf("--examples must be >= 0")
			}
			if opts.Columns.Prompt == "" {
				return usageErrorf("--prompt-column must not be empty")
			}
			if runF != nil {
				return runF(opts)
			}
			return runDataInspect(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "Hugging Face model or tokenizer directory or Hub id (enables token statistics)")
	f.StringVar(&opts.Revision, "revision", "", "Hub revision (branch, tag or commit) of a dataset named by Hub id (default main)")
	f.StringVar(&opts.DataSplit, "data-split", "2,4,4", "proportions of the rows for phases 1, 2 and 3")
	f.Uint32Var(&opts.Seed, "seed", 1234, "seed of the phase split (DeepSpeed-Chat's default is 1234)")
	f.IntVar(&opts.MaxSeqLen, "max-seq-len", 512, "sequence length of phases 1 and 2 (longer is truncated)")
	f.IntVar(&opts.MaxPromptSeqLen, "max-prompt-seq-len", 256, "prompt length of phase 3 (longer is dropped)")
	f.BoolVar(&opts.AddEOTToken, "add-eot-token", false, "append EOS to phase-1 sequences")
	f.StringVar(&opts.EndText, "end-text", data.DefaultEndText, "text appended to both phase-2 sequences")
	f.StringVar(&opts.Adapter, "adapter", "", "read the data with this registered dataset's adapter")
	f.StringVar(&opts.Columns.Prompt, "prompt-column", "prompt", "prompt column of a generic file")
	f.StringVar(&opts.Columns.Chosen, "chosen-column", "chosen", "chosen-response column of a generic file (\"\" for none)")
	f.StringVar(&opts.Columns.Rejected, "rejected-column", "rejected", "rejected-response column of a generic file (\"\" for none)")
	f.IntVar(&opts.Examples, "examples", 3, "examples shown per phase")
	bindChatTemplate(f, &opts.ChatTemplate)
	return cmd
}

// dataTokenizer adapts tokenizer.Tokenizer to data.Tokenizer: ids as Hugging
// Face's tokenizer(text) gives them (with the template's BOS), batches on
// all threads.
type dataTokenizer struct {
	t       *tokenizer.Tokenizer
	threads int
}

func (d dataTokenizer) Encode(s string) []int32 { return d.t.Encode(s, true) }
func (d dataTokenizer) EncodeBatch(s []string) [][]int32 {
	return d.t.EncodeBatch(s, true, d.threads)
}

// EncodePlain encodes without the tokenizer's special tokens, as a
// rendered chat template is tokenized (data.PlainEncoder).
func (d dataTokenizer) EncodePlain(s []string) [][]int32 {
	return d.t.EncodeBatch(s, false, d.threads)
}

// loadDataTokenizer loads a tokenizer for the data package with its special
// ids and a fingerprint of its files.
func loadDataTokenizer(dir string, threads int) (tok dataTokenizer, eos, pad int32, fingerprint string, err error) {
	t, err := tokenizer.Load(dir)
	if err != nil {
		return dataTokenizer{}, 0, 0, "", err
	}
	eos, ok := t.EOS()
	if !ok {
		return dataTokenizer{}, 0, 0, "", fmt.Errorf("tokenizer %s: no EOS token", dir)
	}
	if pad, ok = t.PAD(); !ok {
		pad = eos
	}
	// The files that define a tokenizer make its fingerprint.
	var paths []string
	for _, f := range tokenizerFiles {
		paths = append(paths, filepath.Join(dir, f))
	}
	fingerprint, err = data.HashFiles(paths...)
	if err != nil {
		return dataTokenizer{}, 0, 0, "", err
	}
	return dataTokenizer{t: t, threads: threads}, eos, pad, fingerprint, nil
}

func runDataInspect(opts *DataInspectOptions) error {
	ds, err := data.Resolve(opts.Dataset, hubData(opts.g, data.ResolveOptions{Adapter: opts.Adapter, Columns: opts.Columns}, opts.Revision))
	if err != nil {
		return err
	}
	iopts := data.InspectOptions{
		Split: opts.split, Seed: opts.Seed, MaxSeqLen: opts.MaxSeqLen, MaxPromptLen: opts.MaxPromptSeqLen,
		AddEOS: opts.AddEOTToken, EndText: opts.EndText, Examples: opts.Examples,
	}
	if opts.Examples == 0 {
		iopts.Examples = -1 // none
	}
	if opts.Tokenizer != "" {
		dir, err := resolveModel(opts.g, opts.Tokenizer, "")
		if err != nil {
			return err
		}
		tok, eos, _, _, err := loadDataTokenizer(dir, opts.g.Threads)
		if err != nil {
			return err
		}
		iopts.Tokenizer, iopts.EOS = tok, eos
		if iopts.Chat, err = resolveChatTemplate(opts.ChatTemplate, dir, tok.t); err != nil {
			return err
		}
	}
	rep, err := data.Inspect(ds, iopts)
	if err != nil {
		return err
	}
	return writeReport(opts.g.Out, rep, opts)
}

// phaseName labels phase k+1 in the report.
func phaseName(k int) string { return fmt.Sprintf("%d %s", k+1, data.Phase(k+1)) }

// writeReport prints an inspection report as text.
func writeReport(w io.Writer, rep *data.Report, opts *DataInspectOptions) error {
	p := &errWriter{w: w}
	p.printf("dataset  %s\n", rep.Dataset)
	if rep.Root != "" {
		p.printf("root     %s\n", rep.Root)
	}
	a := rep.Adapter
	var cols []string
	for _, c := range a.Columns {
		cols = append(cols, fmt.Sprintf("%s (%s)", c.Name, c.Kind))
	}
	p.printf("adapter  %s: %s\n", a.Name, strings.Join(cols, ", "))
	p.printf("split    %s, seed %d", opts.split, opts.Seed)
	if a.EvalFromTrain {
		p.printf(" (train-only dataset: train/eval cut 9:1 first)")
	}
	p.printf("\n")
	for _, f := range rep.Ignored {
		p.printf("ignored  %s (no split in its name)\n", f)
	}
	for _, part := range rep.Parts {
		p.printf("\n%s: ", part.Part)
		if part.Missing {
			p.printf("no %q split\n", part.Split)
			continue
		}
		p.printf("split %q, %d file(s), %d rows\n", part.Split, len(part.Files), part.Rows)
		for _, f := range part.Files {
			p.printf("  file    %s\n", f)
		}
		var schema []string
		for _, f := range part.Schema {
			schema = append(schema, f.Name+": "+f.Type)
		}
		p.printf("  schema  %s\n", strings.Join(schema, ", "))
		tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  phase\trows\tkept\tempty\tmalformed\ttoo long\ttruncated\t%s\n", unrenderedHead(rep))
		for k, ph := range part.Phases {
			st := ph.Stats
			tooLong, trunc := "-", "-"
			if rep.Tokenized {
				tooLong, trunc = fmt.Sprint(st.TooLong), fmt.Sprint(st.Truncated)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", phaseName(k), st.Selected, st.Kept, st.Empty, st.Malformed, tooLong, trunc, unrenderedCell(rep, st))
		}
		tw.Flush()
		if rep.Tokenized {
			p.printf("  token lengths before truncation (BOS included):\n")
			tw = tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "  phase\tof\tn\tmean\tmin\tp50\tp90\tp99\tmax\tover limit\t\n")
			for k, ph := range part.Phases {
				for _, l := range ph.Lengths {
					fmt.Fprintf(tw, "  %s\t%s\t%d\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d > %d\t\n", phaseName(k), l.Name, l.N, l.Mean, l.Min, l.P50, l.P90, l.P99, l.Max, l.OverLimit, l.LimitLen)
				}
			}
			tw.Flush()
		}
		for k, ph := range part.Phases {
			for _, e := range ph.Stats.Errors {
				p.printf("  phase %d malformed: %s\n", k+1, e)
			}
			for _, e := range ph.Stats.RenderErrors {
				p.printf("  phase %d not rendered: %s\n", k+1, e)
			}
		}
	}
	if !rep.Tokenized {
		p.printf("\n(no --tokenizer: token lengths, too-long prompts and truncation are not counted)\n")
	}
	for _, part := range rep.Parts {
		for k, ph := range part.Phases {
			for i, ex := range ph.Examples {
				p.printf("\n%s phase %s, example %d (row %d):\n", part.Part, phaseName(k), i+1, ex.Row+1)
				writeExample(p, data.Phase(k+1), ex, rep.Tokenized)
			}
		}
	}
	return p.err
}

// unrenderedHead and unrenderedCell add the "not rendered" column of a
// report made with a chat template.
func unrenderedHead(rep *data.Report) string {
	if !rep.Chat {
		return ""
	}
	return "not rendered\t"
}

func unrenderedCell(rep *data.Report, st data.Stats) string {
	if !rep.Chat {
		return ""
	}
	return fmt.Sprintf("%d\t", st.Unrendered)
}

// writeExample prints one example: the texts the phase uses and, with a
// tokenizer, the ids it gets.
func writeExample(p *errWriter, ph data.Phase, ex data.InspectExample, tokenized bool) {
	s := ex.Sample
	switch ph {
	case data.PhaseSFT:
		p.printf("  prompt    %s\n  chosen    %s\n", quote(s.Prompt), quote(s.Chosen))
		if tokenized {
			p.printf("  ids       %d tokens (prompt %d): %s\n", len(ex.Example.IDs), ex.Example.PromptLen, idList(ex.Example.IDs))
		}
	case data.PhaseReward:
		p.printf("  prompt    %s\n  chosen    %s\n  rejected  %s\n", quote(s.Prompt), quote(s.Chosen), quote(s.Rejected))
		if tokenized {
			p.printf("  chosen    %d tokens: %s\n  rejected  %d tokens: %s\n", len(ex.Example.IDs), idList(ex.Example.IDs), len(ex.Example.Rejected), idList(ex.Example.Rejected))
		}
	default:
		p.printf("  prompt    %s\n", quote(s.Prompt))
		if tokenized {
			p.printf("  ids       %d tokens: %s\n", len(ex.Example.IDs), idList(ex.Example.IDs))
		}
	}
}

// quote shows a string in Go syntax, shortened in the middle past 400 bytes.
func quote(s string) string {
	const max = 400
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	head, tail := s[:max/2], s[len(s)-max/2:]
	for i := 0; i < utf8.UTFMax && len(head) > 0; i++ { // drop a cut rune
		if r, n := utf8.DecodeLastRuneInString(head); r != utf8.RuneError || n > 1 {
			break
		}
		head = head[:len(head)-1]
	}
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	return fmt.Sprintf("%q ... (%d bytes) ... %q", head, len(s), tail)
}

// idList shows up to 12 leading and 4 trailing ids.
func idList(ids []int32) string {
	parts := func(s []int32) string {
		out := make([]string, len(s))
		for i, v := range s {
			out[i] = fmt.Sprint(v)
		}
		return strings.Join(out, " ")
	}
	if len(ids) <= 16 {
		return "[" + parts(ids) + "]"
	}
	return "[" + parts(ids[:12]) + " ... " + parts(ids[len(ids)-4:]) + "]"
}

// errWriter remembers the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, a ...any) { fmt.Fprintf(e, format, a...) }
