package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gochat-ai/gochat/internal/atomicfile"
	"github.com/gochat-ai/gochat/internal/dirlock"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/train"
)

// runFile records which run an output directory holds.
const runFile = "run.json"

// replacedDir is where an --overwrite run moves the previous run's files
// once it has started (beginRun), before deleting them.
const replacedDir = ".gochat-replaced"

// tokenizerFiles are the Hugging Face tokenizer files gochat reads from a
// model directory and copies into the directories it saves (with the chat
// template, which transformers keeps in chat_template.jinja or in
// tokenizer_config.json).
var tokenizerFiles = []string{"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", chatTemplateFile}

// runOutputs are the names (filepath.Match patterns) of everything a
// training command writes into its output directory, the lock file
// aside: what --overwrite replaces. TestRunOutputsCoverWhatRunsWrite
// keeps the list whole.
var runOutputs = append([]string{
	runFile, train.MetricsFile, train.CheckpointDir, train.CheckpointDir + ".old", train.CheckpointDir + ".corrupt", ".checkpoint-*",
	"tensorboard", "*.png", ppo.TimingFile, completeFile,
	"config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json",
	"actor", "critic", "actor_ema",
}, tokenizerFiles...)

// prepareRunDir checks an output directory, whose lock the caller holds,
// against --resume and --overwrite, without changing anything in it: it
// refuses a directory holding a different run, or this run without
// --resume, and returns whether to resume (false where there is nothing
// to resume yet, with a warning, or with --overwrite) and begin, which
// the command calls once everything is loaded and checked, just before it
// writes its first output. begin records the run (run.json) and, with
// --overwrite, first removes the previous run's files: a run that fails
// to start (bad data, a truncated model, the pre-flight) leaves the
// previous run whole, and one that starts never mixes old and new files.
// A replacement cut short by a kill is finished here first.
func prepareRunDir(g *Globals, dir string, options any, resume, overwrite bool) (bool, func() error, error) {
	if err := finishReplace(g, dir); err != nil {
		return false, nil, err
	}
	fp := fingerprintOf(options)
	path := filepath.Join(dir, runFile)
	replace := false
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if resume {
			g.Log.Warn().Str("dir", dir).Msg("--resume: no run there yet, starting afresh")
			resume = false
		}
	case err != nil:
		return false, nil, fmt.Errorf("read %s: %w", path, err)
	default:
		var prev struct {
			Fingerprint string `json:"fingerprint"`
		}
		_ = json.Unmarshal(b, &prev)
		switch {
		case overwrite:
			replace, resume = true, false
		case prev.Fingerprint != fp:
			return false, nil, usageErrorf("--output-dir %s holds a different run (its settings differ); choose another directory or pass --overwrite", dir)
		case !resume:
			return false, nil, usageErrorf("--output-dir %s already holds this run; pass --resume to continue it or --overwrite to start again", dir)
		}
	}
	rec, err := json.MarshalIndent(map[string]any{"fingerprint": fp, "options": options}, "", "  ")
	if err != nil {
		return false, nil, fmt.Errorf("record the run in %s: %w", path, err)
	}
	begin := func() error {
		if replace {
			if err := moveRunOutputs(dir); err != nil {
				return fmt.Errorf("--overwrite: move the previous run in %s aside: %w", dir, err)
			}
		}
		if err := writeFileAtomic(path, rec); err != nil {
			return err
		}
		if replace {
			if err := os.RemoveAll(filepath.Join(dir, replacedDir)); err != nil {
				return fmt.Errorf("--overwrite: remove the previous run: %w", err)
			}
			g.Log.Info().Str("dir", dir).Msg("--overwrite: the previous run's files are replaced")
		}
		return nil
	}
	return resume, begin, nil
}

// moveRunOutputs moves the run outputs in dir into dir/replacedDir,
// run.json first: from then on dir holds no run, and finishReplace can
// complete a move a kill cut short.
func moveRunOutputs(dir string) error {
	aside := filepath.Join(dir, replacedDir)
	if err := os.MkdirAll(aside, 0o755); err != nil {
		return err
	}
	names, err := runOutputNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := moveEntry(filepath.Join(dir, name), filepath.Join(aside, name)); err != nil {
			return err
		}
	}
	atomicfile.SyncDir(dir)
	return nil
}

// moveEntry is os.Rename (a test makes it fail).
var moveEntry = os.Rename

// runOutputNames lists the entries of dir that runOutputs names, run.json
// first.
func runOutputNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		if name == runFile || name == dirlock.File || name == replacedDir {
			continue
		}
		for _, pat := range runOutputs {
			if ok, _ := filepath.Match(pat, name); ok {
				names = append(names, name)
				break
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, runFile)); err == nil {
		names = append([]string{runFile}, names...)
	}
	return names, nil
}

// finishReplace completes an --overwrite replacement that a kill
// interrupted (dir/replacedDir exists). Without a run.json the old run was
// being moved aside, which is finished before the aside folder is
// deleted; with one the new run had begun and only the deletion was left.
// Either way dir is left holding no file of the old run.
func finishReplace(g *Globals, dir string) error {
	aside := filepath.Join(dir, replacedDir)
	if _, err := os.Stat(aside); err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, runFile)); errors.Is(err, os.ErrNotExist) {
		if err := moveRunOutputs(dir); err != nil {
			return fmt.Errorf("finish the interrupted --overwrite in %s: %w", dir, err)
		}
	}
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("finish the interrupted --overwrite in %s: %w", dir, err)
	}
	g.Log.Info().Str("dir", dir).Msg("finished removing the previous run of an --overwrite that was interrupted")
	return nil
}

// lockOutput takes the output directory's lock (dirlock) for the rest of
// the command; a directory another run holds is a usage error naming it.
func lockOutput(dir string) (release func(), err error) {
	release, err = dirlock.Lock(dir)
	if errors.Is(err, dirlock.ErrBusy) {
		return nil, usageError{err}
	}
	return release, err
}
