package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// userAgent identifies gochat's requests.
const userAgent = "gochat-hub/1"

// download resolves revision to its commit, downloads the files gochat
// reads that the snapshot lacks, links them into the snapshot once all are
// there (so that a snapshot gochat makes is never half made), records the
// files a model repository lacks under .no_exist, and writes
// refs/<revision>.
func (c *Client) download(ctx context.Context, r Repo, revision string) (string, error) {
	if err := ValidID(r.ID); err != nil {
		return "", fmt.Errorf("%s: %w", r, err)
	}
	if !isCommit(revision) {
		if err := checkRelPath(revision); err != nil {
			return "", fmt.Errorf("%s: revision: %w", r, err)
		}
	}
	info, err := c.repoInfo(ctx, r, revision)
	if err != nil {
		return "", err
	}
	repoDir := filepath.Join(c.Cache, r.Folder())
	snap := filepath.Join(repoDir, "snapshots", info.SHA)
	var files []string
	index := ""
	if r.Type == Dataset {
		files, err = datasetFiles(info.Files)
	} else {
		files, index, err = modelFiles(info.Files)
	}
	if err != nil {
		return "", fmt.Errorf("%s (revision %s, commit %s): %w", r, revision, info.SHA, err)
	}
	c.Log.Info().Str("repo", r.String()).Str("revision", revision).Str("commit", info.SHA).Int("files", len(files)).
		Str("cache", c.Cache).Msg("fetching from the Hub")
	blobs := map[string]string{} // file -> its new blob; absent when the snapshot has it
	fetch := func(names []string) error {
		for _, f := range names {
			if exists(filepath.Join(snap, filepath.FromSlash(f))) {
				continue
			}
			m, err := c.head(ctx, r, revision, info.SHA, f)
			if err != nil {
				return err
			}
			blob := filepath.Join(repoDir, "blobs", m.ETag)
			if err := c.fetchBlob(ctx, r, revision, f, m, blob); err != nil {
				return err
			}
			blobs[f] = blob
		}
		return nil
	}
	if err := fetch(files); err != nil {
		return "", err
	}
	if index != "" {
		p, ok := blobs[index]
		if !ok {
			p = filepath.Join(snap, index)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", r, err)
		}
		shards, err := parseIndex(b)
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", r, index, err)
		}
		have := map[string]bool{}
		for _, f := range info.Files {
			have[f] = true
		}
		for i, s := range shards {
			shards[i] = pathJoin(pathDir(index), s)
			if !have[shards[i]] {
				return "", fmt.Errorf("%s (commit %s): %s names the shard %s, which the repository lacks", r, info.SHA, index, shards[i])
			}
		}
		files = append(files, shards...)
		if err := fetch(shards); err != nil {
			return "", err
		}
	}
	for _, f := range files {
		if blob, ok := blobs[f]; ok {
			if err := link(snap, f, blob); err != nil {
				return "", fmt.Errorf("%s: %w", r, err)
			}
		}
	}
	if r.Type == Model {
		listed := map[string]bool{}
		for _, f := range info.Files {
			listed[f] = true
		}
		for _, f := range modelExtras() {
			if !listed[f] {
				if err := markAbsent(repoDir, info.SHA, f); err != nil {
					return "", fmt.Errorf("%s: %w", r, err)
				}
			}
		}
	}
	if err := writeRef(repoDir, revision, info.SHA); err != nil {
		return "", fmt.Errorf("%s: %w", r, err)
	}
	return snap, nil
}

func pathDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func pathJoin(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// setHeaders sets the headers of a request; the token only goes to the
// Hub's own host.
func (c *Client) setHeaders(req *http.Request) {
	req.Header.Set("User-Agent", userAgent)
	if c.Token != "" && sameHost(c.endpoint(), req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

// sameHost reports whether u is on the endpoint's host and port.
func sameHost(endpoint string, u *url.URL) bool {
	e, err := url.Parse(endpoint)
	return err == nil && strings.EqualFold(e.Host, u.Host)
}

// escapePath escapes each part of a repository path for a URL.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// repoInfo asks the Hub which commit a revision is and which files it has.
func (c *Client) repoInfo(ctx context.Context, r Repo, revision string) (repoInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, orDefault(c.MetaTimeout, 30*time.Second))
	defer cancel()
	u := c.endpoint() + "/api/" + r.Type.plural() + "/" + r.ID + "/revision/" + url.PathEscape(revision)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return repoInfo{}, fmt.Errorf("%s: %w", r, err)
	}
	c.setHeaders(req)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return repoInfo{}, c.netError(ctx, r, revision, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return repoInfo{}, c.statusError(resp, r, revision, "")
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxInfo+1))
	if err != nil {
		return repoInfo{}, c.netError(ctx, r, revision, err)
	}
	info, err := parseRepoInfo(b)
	if err != nil {
		return repoInfo{}, fmt.Errorf("%s (revision %s): %s: %w", r, revision, u, err)
	}
	if info.Disabled {
		return repoInfo{}, fmt.Errorf("%s has been disabled on the Hub: %w", r, ErrAccess)
	}
	return info, nil
}

// head asks for a file's metadata at a commit. It follows relative
// redirects (a renamed repository) but not one to another host: that is
// the CDN of an LFS file, fetched later without the token.
func (c *Client) head(ctx context.Context, r Repo, revision, commit, file string) (fileMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, orDefault(c.MetaTimeout, 30*time.Second))
	defer cancel()
	hc := *c.httpClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u := c.endpoint() + "/" + r.Type.urlPrefix() + r.ID + "/resolve/" + url.PathEscape(commit) + "/" + escapePath(file)
	for hops := 0; ; hops++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		if err != nil {
			return fileMeta{}, fmt.Errorf("%s: %w", r, err)
		}
		c.setHeaders(req)
		req.Header.Set("Accept-Encoding", "identity") // the size of the file, not of a compressed form
		resp, err := hc.Do(req)
		if err != nil {
			return fileMeta{}, c.netError(ctx, r, revision, err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 == 3 && hops < 10 {
			if loc, err := url.Parse(resp.Header.Get("Location")); err == nil && loc.Host == "" && loc.Scheme == "" {
				u = req.URL.ResolveReference(loc).String()
				continue
			}
		}
		if resp.StatusCode/100 != 2 && resp.StatusCode/100 != 3 {
			return fileMeta{}, c.statusError(resp, r, revision, file)
		}
		m, err := parseFileMeta(resp.Header, resp.StatusCode, u)
		if err != nil {
			return fileMeta{}, fmt.Errorf("%s (revision %s): %s: %w", r, revision, file, err)
		}
		if loc, err := req.URL.Parse(m.Location); err == nil {
			m.Location = loc.String()
		}
		return m, nil
	}
}

// transfer is a blob being written: the .incomplete file, the hash of its
// content so far, and its length.
type transfer struct {
	f    *os.File
	h    hash.Hash // nil when no sha256 is expected
	have int64
}

func (t *transfer) Write(p []byte) (int, error) {
	n, err := t.f.Write(p)
	if t.h != nil {
		t.h.Write(p[:n])
	}
	t.have += int64(n)
	return n, err
}

// reset empties the file, to download from the first byte.
func (t *transfer) reset() error {
	if err := t.f.Truncate(0); err != nil {
		return err
	}
	if _, err := t.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if t.h != nil {
		t.h.Reset()
	}
	t.have = 0
	return nil
}

// fetchBlob downloads a file's content into blobs/<etag>: under an
// exclusive lock on .locks/<repo folder>/<etag>.lock (huggingface_hub's),
// into blobs/<etag>.incomplete, resuming what is there with a Range
// request, trying again after a dropped connection, then checking the size
// and, for an LFS file, the sha256 before renaming it into place.
func (c *Client) fetchBlob(ctx context.Context, r Repo, revision, file string, m fileMeta, blob string) error {
	if exists(blob) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	lockPath := filepath.Join(c.Cache, ".locks", r.Folder(), m.ETag+".lock")
	unlock, err := lockFile(ctx, lockPath, func() {
		c.Log.Info().Str("repo", r.String()).Str("file", file).Msg("waiting for another download of the same file")
	})
	if err != nil {
		return fmt.Errorf("%s: lock %s: %w", r, lockPath, err)
	}
	defer unlock()
	if exists(blob) {
		return nil
	}
	inc := blob + ".incomplete"
	f, err := os.OpenFile(inc, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	defer f.Close()
	t := &transfer{f: f}
	if m.SHA256 != "" {
		t.h = sha256.New()
	}
	if err := c.resumeFrom(t, m.Size); err != nil {
		return fmt.Errorf("%s: %s: %w", r, inc, err)
	}
	what := fmt.Sprintf("%s: %s", r, file)
	ev := c.Log.Info().Str("repo", r.String()).Str("file", file).Int64("bytes", m.Size)
	if t.have > 0 {
		ev = ev.Int64("resume_at", t.have)
	}
	ev.Msg("download")
	prog := newProgress(c, file, m.Size, t.have)
	wait := orDefault(c.RetryWait, time.Second)
	fails := 0
	for t.have < m.Size || m.Size == 0 {
		before := t.have
		retry, err := c.getOnce(ctx, r, revision, file, m, t, prog)
		if err == nil && t.have == m.Size {
			break
		}
		if err == nil {
			err, retry = fmt.Errorf("the response ended after %d of %d bytes", t.have, m.Size), true
		}
		if !retry {
			prog.stop()
			if t.have > m.Size {
				f.Close()
				os.Remove(inc)
			}
			return fmt.Errorf("download %s: %w", what, err)
		}
		if t.have > before {
			fails = 0
		} else {
			fails++
		}
		if fails > orDefault(c.Retries, 5) {
			prog.stop()
			return fmt.Errorf("download %s: %w (gave up after %d tries without progress; run again to resume at byte %d of %d)",
				what, err, fails, t.have, m.Size)
		}
		prog.breakLine()
		c.Log.Warn().Err(err).Str("repo", r.String()).Str("file", file).Int64("resume_at", t.have).Msg("download interrupted; resuming")
		if wait > 0 && fails > 0 {
			d := min(wait<<(fails-1), 30*time.Second)
			select {
			case <-ctx.Done():
				prog.stop()
				return ctx.Err()
			case <-time.After(d):
			}
		}
	}
	prog.finish(t.have)
	if t.h != nil {
		if got := hex.EncodeToString(t.h.Sum(nil)); got != m.SHA256 {
			f.Close()
			os.Remove(inc)
			return fmt.Errorf("download %s: the content's sha256 is %s, the Hub's X-Linked-Etag says %s: the download is corrupt and was discarded; run again",
				what, got, m.SHA256)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	if err := os.Rename(inc, blob); err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	return nil
}

// resumeFrom takes up an .incomplete file left by an earlier attempt: its
// bytes are hashed and the next request asks for the rest. A file longer
// than the blob is emptied.
func (c *Client) resumeFrom(t *transfer, size int64) error {
	st, err := t.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > size {
		return t.reset()
	}
	if t.h != nil {
		if _, err := io.Copy(t.h, io.LimitReader(t.f, st.Size())); err != nil {
			return err
		}
	}
	if _, err := t.f.Seek(st.Size(), io.SeekStart); err != nil {
		return err
	}
	t.have = st.Size()
	return nil
}

// getOnce makes one GET of a file's content from t.have on and appends what
// arrives. retry says whether a failure is worth another attempt (a dropped
// connection, a stall, a 5xx) rather than final (a refusal).
func (c *Client) getOnce(ctx context.Context, r Repo, revision, file string, m fileMeta, t *transfer, prog *progress) (retry bool, err error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stall := orDefault(c.StallTimeout, time.Minute)
	watchdog := time.AfterFunc(stall, cancel)
	defer watchdog.Stop()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, m.Location, nil)
	if err != nil {
		return false, err
	}
	c.setHeaders(req)
	req.Header.Set("Accept-Encoding", "identity")
	if t.have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", t.have))
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return true, err
	}
	defer resp.Body.Close()
	switch s := resp.StatusCode; {
	case s == http.StatusPartialContent:
		cr := resp.Header.Get("Content-Range")
		if start, err := contentRangeStart(cr); err != nil || start != t.have {
			return true, errors.Join(fmt.Errorf("the server resumed at %q, not at byte %d", cr, t.have), t.reset())
		}
	case s == http.StatusOK:
		if t.have > 0 { // the Range was ignored: start again
			if err := t.reset(); err != nil {
				return false, err
			}
		}
	case s == http.StatusRequestedRangeNotSatisfiable && t.have == m.Size:
		return false, nil
	case s == http.StatusRequestedRangeNotSatisfiable:
		return true, errors.Join(errors.New("range not satisfiable"), t.reset())
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s/100 == 5:
		return true, fmt.Errorf("HTTP %d from %s", s, req.URL.Host)
	default:
		return false, c.statusError(resp, r, revision, file)
	}
	buf := make([]byte, 1<<20)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			watchdog.Reset(stall)
			if _, err := t.Write(buf[:n]); err != nil {
				return false, err
			}
			if t.have > m.Size {
				return false, fmt.Errorf("received more than the %d bytes announced", m.Size)
			}
			prog.update(t.have)
		}
		switch {
		case rerr == io.EOF:
			return false, nil
		case rerr == nil:
		case ctx.Err() != nil:
			return false, ctx.Err()
		case actx.Err() != nil:
			return true, fmt.Errorf("no data for %s", stall)
		default:
			return true, rerr
		}
	}
}

// netError explains a request that reached no server.
func (c *Client) netError(ctx context.Context, r Repo, revision string, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("cannot reach the Hub at %s for %s (revision %s): %w; check the network, HF_ENDPOINT and any proxy, or set HF_HUB_OFFLINE=1 to use only the cache at %s",
		c.endpoint(), r, revision, err, c.Cache)
}

// statusError explains a refusal by the Hub, with what to do about it.
func (c *Client) statusError(resp *http.Response, r Repo, revision, file string) error {
	s := resp.StatusCode
	code := resp.Header.Get(headerErrorCode)
	detail := ""
	if m := resp.Header.Get(headerErrorMsg); m != "" {
		detail = ": " + m
	}
	page := c.endpoint() + "/" + r.Type.urlPrefix() + r.ID
	what := fmt.Sprintf("%s (revision %s)", r, revision)
	switch {
	case code == "RevisionNotFound":
		return fmt.Errorf("%s has no revision %q on the Hub at %s (HTTP %d); check --revision: %w", r, revision, c.endpoint(), s, ErrNotFound)
	case code == "EntryNotFound":
		return fmt.Errorf("%s has no file %s (HTTP %d): %w", what, file, s, ErrNotFound)
	case code == "RepoNotFound" || s == http.StatusNotFound:
		if s == http.StatusUnauthorized && c.Token == "" {
			return fmt.Errorf("%s: no such repository on the Hub at %s, or it is private (HTTP 401); check the name, and for a private repository set HF_TOKEN or run `huggingface-cli login`: %w",
				what, c.endpoint(), ErrNotFound)
		}
		return fmt.Errorf("%s: no such repository on the Hub at %s (HTTP %d); check the name (Hub ids are ORG/NAME, like facebook/opt-1.3b): %w",
			what, c.endpoint(), s, ErrNotFound)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		if c.Token == "" {
			return fmt.Errorf("%s is gated or private and no token was given (HTTP %d%s); set HF_TOKEN to a token with access (or run `huggingface-cli login`), and for a gated repository accept its conditions at %s: %w",
				what, s, detail, page, ErrAccess)
		}
		return fmt.Errorf("%s: the Hub refused the token from HF_TOKEN or the token file (HTTP %d%s); ask for access at %s or use a token that has it: %w",
			what, s, detail, page, ErrAccess)
	}
	f := ""
	if file != "" {
		f = " " + file
	}
	return fmt.Errorf("%s%s: HTTP %d from %s%s", what, f, s, resp.Request.URL.Host, detail)
}
