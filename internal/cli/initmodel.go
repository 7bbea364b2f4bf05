package cli

import (
	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/model"
)

// InitOptions are the options of `gochat init`.
type InitOptions struct {
	g         *Globals
	Arch      string
	Tokenizer string
	OutputDir string
	Seed      uint64
	Std       float64
}

func newInitCmd(g *Globals, runF func(*InitOptions) error) *cobra.Command {
	opts := &InitOptions{g: g}
	cmd := &cobra.Command{
		Use:   "init --arch opt-125m|CONFIG.json --output-dir DIR [--tokenizer DIR]",
		Short: "Write a randomly initialised model directory (training from scratch)",
		Long: `Write a Hugging Face model directory with freshly initialised weights, as
transformers initialises OPT (weights N(0, 0.02²), biases 0, LayerNorms 1),
for a built-in architecture or a config.json, plus the tokenizer files of
--tokenizer. The result is a --model for sft, reward and generate.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if opts.Arch == "" || opts.OutputDir == "" {
				return usageErrorf("--arch and --output-dir are required")
			}
			if runF != nil {
				return runF(opts)
			}
			return runInit(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Arch, "arch", "", "a built-in architecture (opt-125m, opt-350m, ...) or a config.json")
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "copy the tokenizer files of this directory")
	f.StringVar(&opts.OutputDir, "output-dir", "", "where to write config.json and model.safetensors")
	f.Uint64Var(&opts.Seed, "seed", 1234, "initialisation seed")
	f.Float64Var(&opts.Std, "init-std", 0.02, "standard deviation of the weights")
	return cmd
}

func runInit(opts *InitOptions) error {
	cfg, err := loadArch(opts.Arch)
	if err != nil {
		return usageError{err}
	}
	dev, err := newDevice(opts.g)
	if err != nil {
		return err
	}
	m, err := model.New(dev, cfg, model.Options{})
	if err != nil {
		return err
	}
	m.InitRandom(opts.Seed, opts.Std)
	if err := m.Save(opts.OutputDir, model.SaveOptions{}); err != nil {
		return err
	}
	if opts.Tokenizer != "" {
		if err := copyTokenizerFiles(opts.Tokenizer, opts.OutputDir); err != nil {
			return err
		}
	}
	opts.g.Log.Info().Str("arch", opts.Arch).Int("params", m.NumParams()).Str("output", opts.OutputDir).Msg("initialised")
	return nil
}
