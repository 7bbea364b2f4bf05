// Package recipes holds gochat's training recipes: short YAML files of
// commented overrides, one per model size and GPU budget, embedded in the
// binary. A recipe names the actor and reward models and gives, per step,
// values for that step's command-line flags (by flag name, e.g.
// learning-rate). Flags given on the command line override the recipe.
//
//	description: what the recipe is for
//	actor: opt-1.3b
//	reward: opt-350m
//	steps:
//	  sft:    {learning-rate: 9.65e-6, num-train-epochs: 16}
//	  reward: {learning-rate: 5e-5}
//	  ppo:    {actor-learning-rate: 9.65e-6}
package recipes

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:embed *.yaml
var builtin embed.FS

// Recipe is one parsed recipe.
type Recipe struct {
	Name        string `yaml:"-"`
	Source      string `yaml:"-"` // file path, or "builtin:NAME"
	Description string `yaml:"description"`
	// Generator names a task generator that `gochat train` runs before
	// step 1 (the demo's data and from-scratch models); "" for none.
	Generator string `yaml:"generator"`
	Actor     string `yaml:"actor"`
	Reward    string `yaml:"reward"`
	// Steps maps a step ("sft", "reward", "ppo") to flag values by flag
	// name. Values are YAML scalars or lists, rendered as flag strings.
	Steps map[string]map[string]any `yaml:"steps"`
}

// StepNames are the steps a recipe may configure.
var StepNames = []string{"sft", "reward", "ppo"}

// Names lists the built-in recipes.
func Names() []string {
	entries, _ := fs.ReadDir(builtin, ".")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Load reads a built-in recipe by name, or a YAML file by path.
func Load(nameOrPath string) (*Recipe, error) {
	if b, err := builtin.ReadFile(nameOrPath + ".yaml"); err == nil {
		return Parse(b, "builtin:"+nameOrPath)
	}
	b, err := os.ReadFile(nameOrPath)
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(nameOrPath, "/.") {
		return nil, fmt.Errorf("unknown recipe %q (built in: %s; or give a YAML file)", nameOrPath, strings.Join(Names(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("read recipe: %w", err)
	}
	return Parse(b, nameOrPath)
}

// Parse parses and validates recipe YAML; source names it in errors.
func Parse(b []byte, source string) (*Recipe, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var r Recipe
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("recipe %s is empty", source)
		}
		return nil, fmt.Errorf("recipe %s: %w", source, err)
	}
	r.Source = source
	r.Name = strings.TrimSuffix(path.Base(strings.TrimPrefix(source, "builtin:")), ".yaml")
	for step, flags := range r.Steps {
		known := false
		for _, s := range StepNames {
			known = known || s == step
		}
		if !known {
			return nil, fmt.Errorf("recipe %s: unknown step %q under steps (want %s)", source, step, strings.Join(StepNames, ", "))
		}
		for k, v := range flags {
			if _, err := FlagValue(v); err != nil {
				return nil, fmt.Errorf("recipe %s: steps.%s.%s: %w", source, step, k, err)
			}
		}
	}
	return &r, nil
}

// FlagValue renders a recipe value as a flag string (lists comma-joined).
func FlagValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := FlagValue(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", fmt.Errorf("no value")
	}
	return "", fmt.Errorf("a %T is not a flag value", v)
}

// FlagSetter is what Apply needs of a command's flags (pflag.FlagSet).
type FlagSetter interface {
	Set(name, value string) error
	Changed(name string) bool
}

// Apply sets the recipe's flags for step on fs, skipping flags the user set
// on the command line. An unknown flag is an error naming the recipe.
func (r *Recipe) Apply(step string, fs FlagSetter, exists func(name string) bool) error {
	for _, k := range sortedKeys(r.Steps[step]) {
		if !exists(k) {
			return fmt.Errorf("recipe %s: steps.%s.%s: no such flag of gochat %s", r.Source, step, k, step)
		}
		if fs.Changed(k) {
			continue
		}
		v, _ := FlagValue(r.Steps[step][k])
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("recipe %s: steps.%s.%s: %w", r.Source, step, k, err)
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Raw returns the text of a built-in recipe.
func Raw(name string) ([]byte, error) {
	b, err := builtin.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("unknown recipe %q (built in: %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Expand replaces {NAME} in the actor, the reward model and every string
// value of the steps with vars[NAME] (`gochat train` sets {output}, its
// output directory, and {GENERATOR}, the folder a generator wrote to).
func (r *Recipe) Expand(vars map[string]string) {
	r.Actor, r.Reward = ExpandString(r.Actor, vars), ExpandString(r.Reward, vars)
	var expand func(v any) any
	expand = func(v any) any {
		switch x := v.(type) {
		case string:
			return ExpandString(x, vars)
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = expand(e)
			}
			return out
		}
		return v
	}
	for _, flags := range r.Steps {
		for k, v := range flags {
			flags[k] = expand(v)
		}
	}
}

// ExpandString replaces {NAME} in s with vars[NAME].
func ExpandString(s string, vars map[string]string) string {
	for k, val := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", val)
	}
	return s
}

// Sets reports whether the recipe gives flag for step.
func (r *Recipe) Sets(step, flag string) bool {
	_, ok := r.Steps[step][flag]
	return ok
}
