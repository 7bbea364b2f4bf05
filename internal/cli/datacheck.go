package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gochat-ai/gochat/data"
)

// logDataStats tells what the data loading dropped and cut, per dataset
// and split: a warning with the count and the reasons where rows were
// dropped (a null cell the step needs, a malformed row under
// --skip-malformed, a step-3 prompt over --max-prompt-seq-len), and a note
// of the examples cut at --max-seq-len. lenFlag names the length flag and
// its value ("--max-seq-len 512").
func logDataStats(g *Globals, lenFlag string, stats []data.Stats) {
	for _, st := range stats {
		step := stepOf(st.Phase)
		if dropped := st.Empty + st.Malformed + st.TooLong + st.Unrendered; dropped > 0 {
			var why []string
			cols := make([]string, 0, len(st.Nulls))
			for c := range st.Nulls {
				cols = append(cols, c)
			}
			slices.Sort(cols)
			for _, c := range cols {
				why = append(why, fmt.Sprintf("%d with a null %s", st.Nulls[c], c))
			}
			if n := st.Empty - sum(st.Nulls); n > 0 {
				why = append(why, fmt.Sprintf("%d with a null cell", n))
			}
			if st.Malformed > 0 {
				s := fmt.Sprintf("%d malformed (--skip-malformed)", st.Malformed)
				if len(st.Errors) > 0 {
					s += fmt.Sprintf(", the first: %s", st.Errors[0])
				}
				why = append(why, s)
			}
			if st.TooLong > 0 {
				why = append(why, fmt.Sprintf("%d prompts longer than %s", st.TooLong, lenFlag))
			}
			if st.Unrendered > 0 {
				s := fmt.Sprintf("%d not rendered with the chat template", st.Unrendered)
				if len(st.RenderErrors) > 0 {
					s += fmt.Sprintf(", the first: %s", st.RenderErrors[0])
				}
				why = append(why, s)
			}
			g.Log.Warn().Str("dataset", st.Dataset).Str("split", st.Part).Int("step", st.Phase).
				Int64("selected", st.Selected).Int64("dropped", dropped).Int64("null_cells", st.Empty).
				Int64("malformed", st.Malformed).Int64("too_long", st.TooLong).Int64("unrendered", st.Unrendered).
				Msgf("dataset %s: %d of %d %s rows of its %s split dropped: %s", st.Dataset, dropped, st.Selected,
					step, st.Part, strings.Join(why, "; "))
		}
		if st.Truncated > 0 {
			g.Log.Info().Str("dataset", st.Dataset).Str("split", st.Part).Int("step", st.Phase).
				Int64("kept", st.Kept).Int64("truncated", st.Truncated).
				Msgf("dataset %s: %d of %d %s examples of its %s split cut at %s", st.Dataset, st.Truncated, st.Kept,
					step, st.Part, lenFlag)
		}
	}
}

// warnLastTurnOnly says which step-1 examples take the loss on their last
// assistant turn only (data.ChatFormat.SFT) and what to do about it.
func warnLastTurnOnly(g *Globals, template string, stats []data.Stats) {
	for _, st := range stats {
		if st.LastTurnOnly == 0 {
			continue
		}
		g.Log.Warn().Str("dataset", st.Dataset).Str("split", st.Part).Int64("last_turn_only", st.LastTurnOnly).Int64("kept", st.Kept).
			Msgf("dataset %s: %d of %d step-1 examples of its %s split take the loss on the last assistant turn only: the chat template %s renders earlier assistant turns differently once later turns follow (as Qwen3's drops their <think> blocks), so their tokens cannot be located; give --chat-template FILE a training template that renders every turn the same way to train on all of them",
				st.Dataset, st.LastTurnOnly, st.Kept, st.Part, template)
	}
}

// stepOf names the step of a data.Stats phase.
func stepOf(phase int) string {
	if phase == 0 {
		return "unsupervised"
	}
	return fmt.Sprintf("step-%d", phase)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// selectedRows is the number of rows a set's phase slices selected
// (before any was dropped).
func selectedRows(set *data.Set) int64 {
	var n int64
	for _, st := range set.Stats {
		n += st.Selected
	}
	return n
}

// datasetNames lists the datasets of a set's statistics once each.
func datasetNames(set *data.Set) string {
	var names []string
	for _, st := range set.Stats {
		if !slices.Contains(names, st.Dataset) {
			names = append(names, st.Dataset)
		}
	}
	return strings.Join(names, ", ")
}

// checkLearnable refuses step-1 or step-2 training examples that teach
// nothing after truncation to --max-seq-len, and warns when some do: a
// step-1 example without a target token (with --loss-on response, a prompt
// that fills --max-seq-len), or a step-2 pair whose chosen and rejected
// sequences are identical (their scores are equal, the loss is log 2 and
// has no gradient). DeepSpeed-Chat trains on them silently, with loss 0
// when none has a target. A step-1 evaluation split without a target
// token is refused too (its loss is undefined: the first evaluation would
// fail).
func (o *StageOptions) checkLearnable(trainSet, evalSet *data.Set) error {
	col := data.Collator{T: o.MaxSeqLen, ResponseOnly: o.LossOn == "response"}
	idle := func(ex data.Example) bool {
		if o.Step == 1 {
			return col.SFTTargets(ex) == 0
		}
		return slices.Equal(ex.IDs, ex.Rejected)
	}
	what, field := "have no target token", "no_target"
	if o.Step == 1 && o.LossOn == "response" {
		what += " (the prompt fills them, and --loss-on response takes no loss on it)"
	}
	if o.Step == 2 {
		what, field = "have identical chosen and rejected sequences", "identical_pairs"
	}
	counts := make([]int64, len(trainSet.Stats)) // per dataset
	total := 0
	for _, ex := range trainSet.Examples {
		if idle(ex) {
			counts[ex.Dataset]++
			total++
		}
	}
	for i, n := range counts {
		if n > 0 && total < len(trainSet.Examples) {
			st := trainSet.Stats[i]
			o.g.Log.Warn().Str("dataset", st.Dataset).Int("step", o.Step).Int64(field, n).Int64("kept", st.Kept).
				Msgf("dataset %s: %d of %d step-%d training examples %s after truncation to --max-seq-len %d and train nothing",
					st.Dataset, n, st.Kept, o.Step, what, o.MaxSeqLen)
		}
	}
	why, hint := "every prompt fills it", "raise --max-seq-len"
	if o.Step == 1 && o.LossOn == "all" {
		why = "every example is a single token"
	} else if o.Step == 1 {
		hint += " (or take the loss on the prompt too with --loss-on all)"
	}
	if total == len(trainSet.Examples) {
		if o.Step == 1 {
			return usageErrorf("no step-1 training example of --data %s keeps a target token after truncation to --max-seq-len %d (%s), so the loss would be 0; %s",
				datasetNames(trainSet), o.MaxSeqLen, why, hint)
		}
		return usageErrorf("every step-2 training pair of --data %s is identical after truncation to --max-seq-len %d (%s), so the reward model would learn nothing; %s",
			datasetNames(trainSet), o.MaxSeqLen, why, hint)
	}
	if o.Step == 1 && len(evalSet.Examples) > 0 && !slices.ContainsFunc(evalSet.Examples, func(ex data.Example) bool { return !idle(ex) }) {
		return usageErrorf("no step-1 evaluation example of --data %s keeps a target token after truncation to --max-seq-len %d (%s), so the evaluation loss is undefined; %s",
			datasetNames(evalSet), o.MaxSeqLen, why, hint)
	}
	return nil
}
