// Package archtest enforces the dependency rules of DESIGN.md §2 by walking
// `go list` output and the import declarations of every file.
package archtest

import (
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const mod = "github.com/gochat-ai/gochat"

type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	Imports    []string
	GoFiles    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", mod+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		// No skip: a test that cannot list the packages has checked nothing.
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, mod), "/") }

func projectImports(p pkg) []string {
	var out []string
	for _, imp := range p.Imports {
		if imp == mod || strings.HasPrefix(imp, mod+"/") {
			out = append(out, rel(imp))
		}
	}
	return out
}

func under(path string, roots ...string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// violation returns why package name may not import imp, or "".
func violation(name, imp string) string {
	switch {
	case name == "kernels" || (under(name, "kernels") && imp != "kernels"):
		return "kernels imports no project package (a backend only the contract)"
	case under(name, "tokenizer") && !under(imp, "tokenizer"):
		return "tokenizer imports no project package"
	case under(name, "dist") && !under(imp, "dist", "kernels"):
		return "dist imports no project package but kernels"
	case under(name, "hub") && !under(imp, "hub", "internal/atomicfile"):
		return "hub imports no project package but internal/atomicfile (data and internal/cli import it)"
	case under(imp, "kernels/cpu", "kernels/cuda") && !under(name, "internal/cli", "cmd/gochat"):
		return "only internal/cli and cmd/gochat construct concrete backends"
	case under(name, "model") && under(imp, "zero", "dist", "train", "hybridengine", "sft", "reward", "ppo"):
		return "model knows nothing of ranks, stages or training loops"
	case under(name, "sft", "reward", "ppo") && under(imp, "sft", "reward", "ppo") &&
		!under(imp, name) && !(under(name, "ppo") && under(imp, "reward")):
		return "stages do not import each other, except ppo -> reward"
	}
	return ""
}

func TestDependencyRules(t *testing.T) {
	for _, p := range listPackages(t) {
		name := rel(p.ImportPath)
		for _, imp := range projectImports(p) {
			if why := violation(name, imp); why != "" {
				t.Errorf("%s imports %s: %s", name, imp, why)
			}
		}
		base := filepath.Base(name)
		if base == "util" || base == "utils" || base == "common" {
			t.Errorf("package %s: no util/common packages", name)
		}
		// Rule 5: no dot imports; blank imports only in main.
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, is := range af.Imports {
				if is.Name == nil {
					continue
				}
				if is.Name.Name == "." {
					t.Errorf("%s/%s: dot import of %s", name, f, is.Path.Value)
				}
				if is.Name.Name == "_" && p.Name != "main" {
					t.Errorf("%s/%s: blank import of %s outside main", name, f, is.Path.Value)
				}
			}
		}
	}
}

func TestRequiredLayout(t *testing.T) {
	have := map[string]bool{}
	for _, p := range listPackages(t) {
		have[rel(p.ImportPath)] = true
	}
	for _, want := range []string{"cmd/gochat", "internal/cli", "kernels", "kernels/cpu", "model", "tensor", "sft", "reward",
		"ppo", "hybridengine", "zero", "lora", "tokenizer", "data", "recipes", "dist", "optim", "train", "hub"} {
		if !have[want] {
			t.Errorf("package %s is missing", want)
		}
	}
}

func TestViolationTable(t *testing.T) {
	for _, c := range []struct {
		name, imp string
		bad       bool
	}{
		{"kernels/cpu", "kernels", false},
		{"kernels", "tensor", true},
		{"kernels/cpu", "model", true},
		{"model", "kernels/cpu", true},
		{"internal/cli", "kernels/cpu", false},
		{"model", "train", true},
		{"model", "tensor", false},
		{"ppo", "reward", false},
		{"reward", "sft", true},
		{"sft", "ppo", true},
		{"tokenizer", "data", true},
		{"dist/mpi", "dist", false},
		{"hub", "internal/atomicfile", false},
		{"hub/hubtest", "hub", false},
		{"hub", "data", true},
		{"hub", "model", true},
		{"data", "hub", false},
	} {
		if got := violation(c.name, c.imp) != ""; got != c.bad {
			t.Errorf("violation(%s -> %s) = %v, want %v", c.name, c.imp, got, c.bad)
		}
	}
}
