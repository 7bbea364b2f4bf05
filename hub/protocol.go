package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Header names of the Hub's resolve endpoint.
const (
	headerRepoCommit = "X-Repo-Commit" // the commit the file was resolved at
	headerLinkedETag = "X-Linked-Etag" // an LFS file's sha256 (ETag is its pointer's)
	headerLinkedSize = "X-Linked-Size" // an LFS file's size (Content-Length is the redirect's)
	headerErrorCode  = "X-Error-Code"  // RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo
	headerErrorMsg   = "X-Error-Message"
)

// repoInfo is what the Hub's revision endpoint says about a repository at
// a revision (GET /api/{models,datasets}/ID/revision/REV).
type repoInfo struct {
	SHA      string   // the commit the revision points at
	Files    []string // every file in the repository at that commit
	Gated    bool
	Private  bool
	Disabled bool
}

// maxInfo bounds the size of a revision response (a dataset with tens of
// thousands of files takes a few MB).
const maxInfo = 64 << 20

// parseRepoInfo reads a revision response. The commit must be a full hash
// and every file name a safe relative path: both become paths in the cache.
func parseRepoInfo(b []byte) (repoInfo, error) {
	if len(b) > maxInfo {
		return repoInfo{}, fmt.Errorf("repository info of %d bytes exceeds %d", len(b), maxInfo)
	}
	var raw struct {
		SHA      string          `json:"sha"`
		Private  bool            `json:"private"`
		Disabled bool            `json:"disabled"`
		Gated    json.RawMessage `json:"gated"` // false, "auto" or "manual"
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return repoInfo{}, fmt.Errorf("repository info: %w", err)
	}
	if !isCommit(raw.SHA) {
		return repoInfo{}, fmt.Errorf("repository info: sha %q is not a commit hash", raw.SHA)
	}
	info := repoInfo{SHA: raw.SHA, Private: raw.Private, Disabled: raw.Disabled}
	if g := strings.TrimSpace(string(raw.Gated)); g != "" && g != "false" && g != "null" {
		info.Gated = true
	}
	for _, s := range raw.Siblings {
		if err := checkRelPath(s.RFilename); err != nil {
			return repoInfo{}, fmt.Errorf("repository info: file: %w", err)
		}
		info.Files = append(info.Files, s.RFilename)
	}
	return info, nil
}

// fileMeta is what a HEAD request on a resolve URL says about a file.
type fileMeta struct {
	Commit string // X-Repo-Commit
	// ETag names the blob: an LFS file's sha256 (X-Linked-Etag), else the
	// git blob id (ETag), without quotes or a weak prefix.
	ETag string
	Size int64 // X-Linked-Size, else Content-Length
	// Location is where the content is fetched: a CDN URL for an LFS file
	// (the redirect's Location), else the resolve URL.
	Location string
	// SHA256 is the content's expected sha256 (hex) for LFS files, whose
	// X-Linked-Etag is that hash; "" otherwise.
	SHA256 string
}

// parseFileMeta reads the metadata headers of a resolve response (a 2xx,
// or a 3xx to a CDN). reqURL is the URL that was asked.
func parseFileMeta(h http.Header, status int, reqURL string) (fileMeta, error) {
	m := fileMeta{Commit: h.Get(headerRepoCommit), Location: reqURL}
	if m.Commit == "" {
		return m, errors.New("no X-Repo-Commit header: the server does not answer as the Hugging Face Hub does (check HF_ENDPOINT, a proxy or a firewall)")
	}
	linked := h.Get(headerLinkedETag)
	tag := linked
	if tag == "" {
		tag = h.Get("ETag")
	}
	m.ETag = normalizeETag(tag)
	if err := checkETag(m.ETag); err != nil {
		return m, err
	}
	if linked != "" && isSHA256(m.ETag) {
		m.SHA256 = m.ETag
	}
	size := h.Get(headerLinkedSize)
	if size == "" && status/100 == 2 {
		size = h.Get("Content-Length")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(size), 10, 64)
	if err != nil || n < 0 {
		return m, fmt.Errorf("no file size (X-Linked-Size or Content-Length): %q", size)
	}
	m.Size = n
	if status/100 == 3 {
		if m.Location = h.Get("Location"); m.Location == "" {
			return m, fmt.Errorf("redirect (HTTP %d) without a Location", status)
		}
	}
	return m, nil
}

// normalizeETag strips an ETag's weak prefix and quotes (W/"abc" -> abc).
func normalizeETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, `"`)
}

// checkETag accepts an ETag as a blob file name: 1 to 128 letters, digits,
// '-', '_' or '.', and not "." or "..".
func checkETag(s string) error {
	if s == "" {
		return errors.New("no ETag: the file cannot be stored by content (check HF_ENDPOINT)")
	}
	if len(s) > 128 || s == "." || s == ".." {
		return fmt.Errorf("ETag %q cannot name a blob", s)
	}
	for _, c := range []byte(s) {
		if !isWord(c) && c != '-' && c != '.' {
			return fmt.Errorf("ETag %q cannot name a blob", s)
		}
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// contentRangeStart returns the first byte of a 206 response's
// Content-Range ("bytes 100-199/200" -> 100).
func contentRangeStart(v string) (int64, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !ok {
		return 0, fmt.Errorf("Content-Range %q", v)
	}
	first, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, fmt.Errorf("Content-Range %q", v)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("Content-Range %q", v)
	}
	return n, nil
}
