package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
)

// Client finds repositories in the hub cache and downloads the ones it
// lacks. Its fields are read, never changed, by its methods; NewClient
// fills them from the environment.
type Client struct {
	// Cache is the hub cache directory (CacheDir).
	Cache string
	// Endpoint is the Hub's address without a trailing slash (Endpoint).
	Endpoint string
	// Token, when set, is sent as "Authorization: Bearer TOKEN" to the Hub
	// (never to another host, such as the CDN an LFS file redirects to).
	Token string
	// Offline forbids every request: only the cache is used
	// (HF_HUB_OFFLINE=1).
	Offline bool
	// HTTP makes the requests; nil means http.DefaultClient.
	HTTP *http.Client
	// Progress, when set, receives a progress bar per downloaded file
	// (a terminal); otherwise Log gets a line now and then.
	Progress io.Writer
	// Log receives what the client does; the zero Logger discards it.
	Log zerolog.Logger
	// Now is the clock of progress reports; nil means time.Now.
	Now func() time.Time
	// Retries is how many times a download that fails without receiving
	// a byte is tried again (each try resumes where the last one stopped);
	// 0 means 5.
	Retries int
	// RetryWait is the pause before the first retry, doubled for each
	// further one; 0 means one second, negative none.
	RetryWait time.Duration
	// StallTimeout ends an attempt that receives nothing for this long
	// (it is retried); 0 means one minute.
	StallTimeout time.Duration
	// MetaTimeout bounds each metadata request (repository info, HEAD);
	// 0 means 30 seconds.
	MetaTimeout time.Duration
}

// NewClient returns a client configured from the environment as
// huggingface_hub is: the cache (CacheDir), HF_ENDPOINT, the token (Token)
// and HF_HUB_OFFLINE. A nil getenv reads the process environment.
func NewClient(getenv func(string) string) *Client {
	if getenv == nil {
		getenv = os.Getenv
	}
	return &Client{Cache: CacheDir(getenv), Endpoint: Endpoint(getenv), Token: Token(getenv), Offline: Offline(getenv)}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) endpoint() string {
	if c.Endpoint != "" {
		return c.Endpoint
	}
	return DefaultEndpoint
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Sentinel errors, wrapped by the client's errors (test with errors.Is).
var (
	// ErrOffline: HF_HUB_OFFLINE is set and the cache lacks what is asked.
	ErrOffline = errors.New("offline")
	// ErrAccess: the Hub refused access (a gated or private repository).
	ErrAccess = errors.New("access refused")
	// ErrNotFound: no such repository, revision or file on the Hub.
	ErrNotFound = errors.New("not found")
)

// Model returns the local directory of the model a name stands for: an
// existing directory as it is; otherwise a Hub id (after ModelID's short
// forms) at revision ("" means main), from the cache or downloaded into it
// (see Snapshot).
func (c *Client) Model(ctx context.Context, name, revision string) (string, error) {
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return name, nil
	}
	id := ModelID(name)
	if err := ValidID(id); err != nil {
		return "", fmt.Errorf("model %s: not a local directory, and not a Hub id like facebook/opt-1.3b: %v", name, err)
	}
	dir, err := c.Snapshot(ctx, Repo{Model, id}, revision)
	if err != nil && errors.Is(err, ErrNotFound) && id == name {
		return "", fmt.Errorf("%w (and there is no local directory %s)", err, name)
	}
	return dir, err
}

// Dataset returns the snapshot directory of a dataset repository at
// revision (see Snapshot).
func (c *Client) Dataset(ctx context.Context, id, revision string) (string, error) {
	if err := ValidID(id); err != nil {
		return "", fmt.Errorf("dataset %s: %v", id, err)
	}
	return c.Snapshot(ctx, Repo{Dataset, id}, revision)
}

// convertedParquet is the branch where the Hub keeps its Parquet
// conversion of a dataset.
const convertedParquet = "refs/convert/parquet"

// Snapshot returns the snapshot directory of a repository at a revision (a
// branch, a tag or a commit hash; "" means main). A snapshot the cache holds
// with the files gochat reads is used without asking the Hub (Cached);
// otherwise, unless the client is offline, the revision is resolved to its
// commit, the missing files are downloaded (see the package
// documentation), and the ref is recorded. For a dataset at the default
// revision whose main branch has no Parquet or JSON data (a loading
// script), the Hub's Parquet conversion (refs/convert/parquet) is used.
func (c *Client) Snapshot(ctx context.Context, r Repo, revision string) (string, error) {
	dir, lack, err := c.cached(r, revision)
	if err != nil || dir != "" {
		return dir, err
	}
	revs := revisions(r, revision)
	if c.Offline {
		if lack != "" {
			return "", fmt.Errorf("HF_HUB_OFFLINE=1 and %s (revision %s) is incomplete in the cache at %s (no %s); run once online or unset HF_HUB_OFFLINE: %w",
				r, revs[0], c.Cache, lack, ErrOffline)
		}
		return "", fmt.Errorf("HF_HUB_OFFLINE=1 and %s (revision %s) is not in the cache at %s; run once online or unset HF_HUB_OFFLINE: %w",
			r, revs[0], c.Cache, ErrOffline)
	}
	var first error
	for i, rev := range revs {
		dir, err := c.download(ctx, r, rev)
		switch {
		case err == nil:
			return dir, nil
		case i == 0:
			first = err
			if !errors.Is(err, ErrNoFiles) {
				return "", err
			}
		case !errors.Is(err, ErrNoFiles) && !errors.Is(err, ErrNotFound):
			return "", err
		}
	}
	return "", first
}

// Cached is Snapshot without the network: the snapshot of r at revision
// when the cache holds it with the files gochat reads, else an error
// wrapping ErrNotCached that says what is missing.
func (c *Client) Cached(r Repo, revision string) (string, error) {
	dir, lack, err := c.cached(r, revision)
	switch {
	case err != nil || dir != "":
		return dir, err
	case lack != "":
		return "", fmt.Errorf("%s (revision %s) is incomplete in the Hugging Face cache at %s (no %s): %w",
			r, revisions(r, revision)[0], c.Cache, lack, ErrNotCached)
	}
	return "", fmt.Errorf("%s (revision %s) is not in the Hugging Face cache at %s: %w", r, revisions(r, revision)[0], c.Cache, ErrNotCached)
}

// revisions are the revisions that stand for revision: "" is main, and for
// a dataset then also refs/convert/parquet.
func revisions(r Repo, revision string) []string {
	if revision != "" {
		return []string{revision}
	}
	if r.Type == Dataset {
		return []string{"main", convertedParquet}
	}
	return []string{"main"}
}

// cached finds a complete snapshot of r at revision in the cache; when
// there is none, lack names what a snapshot found lacks ("" if none was).
func (c *Client) cached(r Repo, revision string) (dir, lack string, err error) {
	for _, rev := range revisions(r, revision) {
		dir, commit, err := Lookup(c.Cache, r, rev)
		if errors.Is(err, ErrNotCached) {
			continue
		}
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", r, err)
		}
		if m := missing(r.Type, filepath.Join(c.Cache, r.Folder()), commit, dir); m != "" {
			if lack == "" {
				lack = m
			}
			continue
		}
		c.Log.Debug().Str("repo", r.String()).Str("revision", rev).Str("dir", dir).Msg("hub cache")
		return dir, "", nil
	}
	return "", lack, nil
}
