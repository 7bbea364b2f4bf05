package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gochat-ai/gochat/internal/atomicfile"
)

// DefaultEndpoint is the Hub's address when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// expand expands a leading "~" and $VARS in a path from the environment, as
// huggingface_hub does with its path variables.
func expand(p string, getenv func(string) string) string {
	p = os.Expand(p, getenv)
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = filepath.Join(home(getenv), p[1:])
	}
	return p
}

func home(getenv func(string) string) string {
	if h := getenv("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// hfHome is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface.
func hfHome(getenv func(string) string) string {
	if d := getenv("HF_HOME"); d != "" {
		return expand(d, getenv)
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(expand(d, getenv), "huggingface")
	}
	return filepath.Join(home(getenv), ".cache", "huggingface")
}

// CacheDir returns the hub cache directory the way huggingface_hub finds
// it: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (its older name), else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub. A nil getenv reads the process environment.
func CacheDir(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := getenv(v); d != "" {
			return expand(d, getenv)
		}
	}
	return filepath.Join(hfHome(getenv), "hub")
}

// Endpoint returns $HF_ENDPOINT without a trailing slash, else
// DefaultEndpoint.
func Endpoint(getenv func(string) string) string {
	if e := strings.TrimRight(getenv("HF_ENDPOINT"), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Token returns the Hub access token: $HF_TOKEN, else
// $HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH or $HF_HOME/token
// that `huggingface-cli login` writes; "" when there is none.
func Token(getenv func(string) string) string {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(getenv(v)); t != "" {
			return t
		}
	}
	path := getenv("HF_TOKEN_PATH")
	if path != "" {
		path = expand(path, getenv)
	} else {
		path = filepath.Join(hfHome(getenv), "token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Offline reports whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set
// to 1, ON, YES or TRUE.
func Offline(getenv func(string) string) bool {
	v := getenv("HF_HUB_OFFLINE")
	if v == "" {
		v = getenv("TRANSFORMERS_OFFLINE")
	}
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// ErrNotCached reports a revision that the cache does not hold.
var ErrNotCached = errors.New("not in the cache")

// Lookup finds the snapshot of repo at revision in the cache directory:
// snapshots/<commit>, where refs/<revision> holds the commit, or revision
// is the commit hash itself. It does not check which files the snapshot
// holds. The error wraps ErrNotCached when there is no such snapshot.
func Lookup(cache string, r Repo, revision string) (dir, commit string, err error) {
	if revision == "" {
		revision = "main"
	}
	repoDir := filepath.Join(cache, r.Folder())
	commit = revision
	if !isCommit(revision) {
		if err := checkRelPath(revision); err != nil {
			return "", "", fmt.Errorf("revision: %w", err)
		}
		b, err := os.ReadFile(filepath.Join(repoDir, "refs", filepath.FromSlash(revision)))
		if errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("%s: no refs/%s: %w", repoDir, revision, ErrNotCached)
		}
		if err != nil {
			return "", "", err
		}
		commit = strings.TrimSpace(string(b))
		if !isCommit(commit) {
			return "", "", fmt.Errorf("%s: refs/%s holds %q, not a commit hash", repoDir, revision, commit)
		}
	}
	dir = filepath.Join(repoDir, "snapshots", commit)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("%s: no snapshots/%s: %w", repoDir, commit, ErrNotCached)
	}
	return dir, commit, nil
}

// writeRef records that revision names commit (refs/<revision>, written
// atomically); a commit hash needs no ref.
func writeRef(repoDir, revision, commit string) error {
	if revision == commit {
		return nil
	}
	p := filepath.Join(repoDir, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil // unchanged: a read-only cache stays usable
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(p, []byte(commit))
}

// link points the snapshot's file at its blob with a relative symbolic link
// (snapshots/<commit>/data/x.parquet -> ../../../blobs/<etag>).
func link(snapshot, file, blob string) error {
	p := filepath.Join(snapshot, filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(p), blob)
	if err != nil {
		rel = blob
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Symlink(rel, p)
}

// markAbsent records, as huggingface_hub does, that a file does not exist
// at a commit (.no_exist/<commit>/<file>, empty), so that later readers
// need not ask the Hub.
func markAbsent(repoDir, commit, file string) error {
	p := filepath.Join(repoDir, ".no_exist", commit, filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// exists reports whether p is there (through symbolic links).
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
