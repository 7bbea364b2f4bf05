package hub

import (
	"fmt"
	"slices"
	"strings"
)

// RepoType is the kind of a Hub repository.
type RepoType int

// Repository kinds.
const (
	Model RepoType = iota
	Dataset
)

func (t RepoType) String() string {
	if t == Dataset {
		return "dataset"
	}
	return "model"
}

// plural is the kind in cache folder names and API paths ("models",
// "datasets").
func (t RepoType) plural() string { return t.String() + "s" }

// urlPrefix is what precedes a repository id in resolve URLs: nothing for
// models, "datasets/" for datasets.
func (t RepoType) urlPrefix() string {
	if t == Dataset {
		return "datasets/"
	}
	return ""
}

// Repo is a repository on the Hub.
type Repo struct {
	Type RepoType
	// ID is "ORG/NAME" (or a bare "NAME" for the few repositories without
	// an organisation).
	ID string
}

// String names the repository for messages: "facebook/opt-1.3b",
// "dataset Dahoas/rm-static".
func (r Repo) String() string {
	if r.Type == Dataset {
		return "dataset " + r.ID
	}
	return r.ID
}

// Folder is the repository's folder in the cache, as huggingface_hub names
// it: "models--facebook--opt-1.3b", "datasets--Dahoas--rm-static".
func (r Repo) Folder() string {
	return r.Type.plural() + "--" + strings.ReplaceAll(r.ID, "/", "--")
}

// optSizes are the sizes of the facebook/opt-* repositories.
func optSizes() []string {
	return []string{"125m", "350m", "1.3b", "2.7b", "6.7b", "13b", "30b", "66b"}
}

// ModelID returns the Hub id that a model name stands for. DeepSpeed-Chat's
// short forms name the OPT family: "opt-SIZE" and a bare "SIZE", where SIZE
// is one of 125m, 350m, 1.3b, 2.7b, 6.7b, 13b, 30b, 66b (any letter case),
// become "facebook/opt-SIZE". Every other name is returned as it is.
func ModelID(name string) string {
	s := strings.ToLower(name)
	s = strings.TrimPrefix(s, "opt-")
	if slices.Contains(optSizes(), s) {
		return "facebook/opt-" + s
	}
	return name
}

// ValidID checks a repository id the way the Hub does: one or two parts
// separated by "/", each made of letters, digits, '-', '_' and '.', starting
// and ending with a letter, digit or '_'; no "--" or ".."; at most 96
// characters.
func ValidID(id string) error {
	if id == "" {
		return fmt.Errorf("empty repository id")
	}
	if len(id) > 96 {
		return fmt.Errorf("repository id %q is longer than 96 characters", id)
	}
	parts := strings.Split(id, "/")
	if len(parts) > 2 {
		return fmt.Errorf("repository id %q has more than one '/' (want ORG/NAME)", id)
	}
	if strings.Contains(id, "--") || strings.Contains(id, "..") {
		return fmt.Errorf("repository id %q contains \"--\" or \"..\"", id)
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("repository id %q has an empty part", id)
		}
		for _, c := range []byte(p) {
			if !isWord(c) && c != '-' && c != '.' {
				return fmt.Errorf("repository id %q contains %q (want letters, digits, '-', '_', '.')", id, c)
			}
		}
		if !isWord(p[0]) || !isWord(p[len(p)-1]) {
			return fmt.Errorf("repository id %q: each part starts and ends with a letter, digit or '_'", id)
		}
	}
	return nil
}

func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// isCommit reports whether rev is a full commit hash (40 lowercase hex
// digits), which names a snapshot directly.
func isCommit(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for _, c := range []byte(rev) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// checkRelPath accepts a repository-relative path ("data/train.parquet",
// "refs/pr/1"): '/'-separated, not absolute, no empty, "." or ".." parts,
// no backslash or NUL.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("unsafe path %q", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("unsafe path %q", p)
		}
	}
	return nil
}
