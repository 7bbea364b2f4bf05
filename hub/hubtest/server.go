// Package hubtest runs a local HTTP server that behaves like the Hugging
// Face Hub for the requests package hub makes: the revision API with its
// file list (and the tree listing huggingface_hub reads), HEAD and GET on resolve URLs with X-Repo-Commit, ETag,
// X-Linked-Etag and X-Linked-Size, redirects of LFS files to a second
// server standing for the CDN, Range requests, and 401/404 answers with
// X-Error-Code. Faults can be injected: a connection dropped in the middle
// of a body, corrupt content. It records every request.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request a server received.
type Request struct {
	Server string // "hub" or "cdn"
	Method string
	Path   string // unescaped
	Header http.Header
}

// Server is a fake Hub with a fake CDN beside it.
type Server struct {
	// URL is the Hub's endpoint (for HF_ENDPOINT); CDNURL the CDN's, a
	// different host:port.
	URL, CDNURL string
	// Token is the bearer token that opens gated and private repositories.
	Token string

	hub, cdn *httptest.Server
	mu       sync.Mutex
	repos    map[string]*repo // "model:ORG/NAME", "dataset:ORG/NAME"
	blobs    map[string][]byte
	drops    map[string]int  // file path -> bytes sent before the connection drops, once
	corrupt  map[string]bool // file path -> served with a flipped byte
	requests []Request
	commits  int
	renames  map[string]string // "kind:old id" -> new id
}

type repo struct {
	gated, private bool
	branches       map[string]string          // branch -> commit
	commits        map[string]map[string]file // commit -> path -> file
}

type file struct {
	path string
	data []byte
	lfs  bool
}

// New starts a fake Hub and its CDN; both stop when the test ends.
func New(t testing.TB) *Server {
	s := &Server{repos: map[string]*repo{}, blobs: map[string][]byte{}, drops: map[string]int{}, corrupt: map[string]bool{},
		renames: map[string]string{}}
	s.hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.cdn = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.URL, s.CDNURL = s.hub.URL, s.cdn.URL
	t.Cleanup(s.Close)
	return s
}

// Close stops both servers; later requests fail to connect.
func (s *Server) Close() {
	s.hub.Close()
	s.cdn.Close()
}

// IsLFS reports whether the fake Hub stores a file with Git LFS: weights
// and data files (as the Hub's default .gitattributes says), and any file
// over 10 kB.
func IsLFS(name string, size int) bool {
	switch path.Ext(name) {
	case ".safetensors", ".bin", ".parquet", ".h5", ".msgpack", ".onnx", ".pt":
		return true
	}
	return size > 10_000
}

// Add commits files to a repository's branch ("model" or "dataset" kind,
// creating the repository) and returns the new commit hash.
func (s *Server) Add(kind, id, branch string, files map[string][]byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := kind + ":" + id
	r := s.repos[key]
	if r == nil {
		r = &repo{branches: map[string]string{}, commits: map[string]map[string]file{}}
		s.repos[key] = r
	}
	s.commits++
	h := sha1.New()
	fmt.Fprintf(h, "%s %s %d", key, branch, s.commits)
	commit := hex.EncodeToString(h.Sum(nil))
	fs := map[string]file{}
	for p, b := range files {
		fs[p] = file{path: p, data: b, lfs: IsLFS(p, len(b))}
	}
	r.commits[commit] = fs
	r.branches[branch] = commit
	return commit
}

// Gate makes a repository gated: its files need Token.
func (s *Server) Gate(kind, id string) { s.mu.Lock(); s.repos[kind+":"+id].gated = true; s.mu.Unlock() }

// Private makes a repository private: even its info needs Token.
func (s *Server) Private(kind, id string) {
	s.mu.Lock()
	s.repos[kind+":"+id].private = true
	s.mu.Unlock()
}

// Rename makes requests for a repository's old id answer with a relative
// redirect (307) to the same URL with its new id, as the Hub does for a
// renamed repository.
func (s *Server) Rename(kind, oldID, newID string) {
	s.mu.Lock()
	s.renames[kind+":"+oldID] = newID
	s.mu.Unlock()
}

// redirectRenamed answers a request for a renamed repository.
func (s *Server) redirectRenamed(w http.ResponseWriter, r *http.Request, kind, id string) bool {
	s.mu.Lock()
	to, ok := s.renames[kind+":"+id]
	s.mu.Unlock()
	if !ok {
		return false
	}
	p := r.URL.EscapedPath()
	i := strings.Index(p, "/"+id+"/")
	w.Header().Set("Location", p[:i+1]+to+p[i+1+len(id):])
	w.WriteHeader(http.StatusTemporaryRedirect)
	return true
}

// DropAfter makes the next GET of a file's content send n bytes of it and
// then close the connection.
func (s *Server) DropAfter(filePath string, n int) { s.mu.Lock(); s.drops[filePath] = n; s.mu.Unlock() }

// Corrupt makes GETs of a file's content serve it with its first byte
// changed (the announced sha256 and size stay).
func (s *Server) Corrupt(filePath string) { s.mu.Lock(); s.corrupt[filePath] = true; s.mu.Unlock() }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Reset forgets the requests received so far.
func (s *Server) Reset() { s.mu.Lock(); s.requests = nil; s.mu.Unlock() }

// GitBlobID is the git object id of content, the ETag of a non-LFS file.
func GitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the hex sha256 of content, the X-Linked-Etag of an LFS file.
func SHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (s *Server) record(server string, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Server: server, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()})
	s.mu.Unlock()
}

// fail answers an error the way the Hub does: a status, X-Error-Code and
// X-Error-Message.
func fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, status)
}

// lookup finds a repository and a revision's commit, or answers the error.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, kind, id, rev string, needFiles bool) (*repo, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repos[kind+":"+id]
	authorized := s.Token != "" && r.Header.Get("Authorization") == "Bearer "+s.Token
	if rp == nil || (rp.private && !authorized) {
		status := http.StatusNotFound
		if r.Header.Get("Authorization") == "" {
			status = http.StatusUnauthorized // the Hub hides private repositories from anonymous users
		}
		fail(w, status, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	if needFiles && rp.gated && !authorized {
		fail(w, http.StatusUnauthorized, "GatedRepo", fmt.Sprintf("Access to %s %s is restricted. You must have access to it and be authenticated to access it.", kind, id))
		return nil, "", false
	}
	commit := rev
	if c, ok := rp.branches[rev]; ok {
		commit = c
	}
	if _, ok := rp.commits[commit]; !ok {
		fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return rp, commit, true
}

// serveHub answers the revision API and resolve URLs.
func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.record("hub", r)
	p := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(p, "/api/"); ok {
		kind, rest, _ := strings.Cut(rest, "/")
		serve := s.serveInfo
		id, rev, ok := strings.Cut(rest, "/revision/")
		if !ok {
			serve = s.serveTree
			id, rev, ok = strings.Cut(rest, "/tree/")
		}
		if !ok || (kind != "models" && kind != "datasets") || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		rev, _ = url.PathUnescape(rev)
		if s.redirectRenamed(w, r, strings.TrimSuffix(kind, "s"), id) {
			return
		}
		serve(w, r, strings.TrimSuffix(kind, "s"), id, rev)
		return
	}
	kind := "model"
	if rest, ok := strings.CutPrefix(p, "/datasets/"); ok {
		kind, p = "dataset", "/"+rest
	}
	id, rest, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/resolve/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	rev, fp, _ := strings.Cut(rest, "/")
	rev, _ = url.PathUnescape(rev)
	fp, _ = url.PathUnescape(fp)
	if s.redirectRenamed(w, r, kind, id) {
		return
	}
	rp, commit, ok := s.lookup(w, r, kind, id, rev, true)
	if !ok {
		return
	}
	s.mu.Lock()
	f, ok := rp.commits[commit][fp]
	s.mu.Unlock()
	w.Header().Set("X-Repo-Commit", commit)
	if !ok {
		fail(w, http.StatusNotFound, "EntryNotFound", fp+" does not exist at "+commit)
		return
	}
	if f.lfs {
		sum := SHA256(f.data)
		s.mu.Lock()
		s.blobs[sum] = f.data
		s.mu.Unlock()
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
		w.Header().Set("ETag", `"`+GitBlobID([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+sum))+`"`)
		w.Header().Set("Location", s.CDNURL+"/blobs/"+sum+"?file="+url.QueryEscape(fp))
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitBlobID(f.data)+`"`)
	s.serveContent(w, r, fp, f.data)
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, kind, id, rev string) {
	rp, commit, ok := s.lookup(w, r, kind, id, rev, false)
	if !ok {
		return
	}
	s.mu.Lock()
	var names []string
	for p := range rp.commits[commit] {
		names = append(names, p)
	}
	gated := any(false)
	if rp.gated {
		gated = "manual"
	}
	private := rp.private
	s.mu.Unlock()
	slices.Sort(names)
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	info := map[string]any{"_id": "0", "id": id, "sha": commit, "private": private, "gated": gated, "disabled": false,
		"lastModified": time.Unix(0, 0).UTC().Format(time.RFC3339), "siblings": []sibling{}}
	var sib []sibling
	for _, n := range names {
		sib = append(sib, sibling{n})
	}
	if sib != nil {
		info["siblings"] = sib
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(info)
}

// serveTree answers the recursive tree listing of a revision
// (GET /api/{models,datasets}/ID/tree/REV?recursive=true), which
// huggingface_hub's snapshot_download reads: files with their git blob id,
// size and LFS sha256, and the folders.
func (s *Server) serveTree(w http.ResponseWriter, r *http.Request, kind, id, rev string) {
	rp, commit, ok := s.lookup(w, r, kind, id, rev, false)
	if !ok {
		return
	}
	type lfs struct {
		OID         string `json:"oid"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type entry struct {
		Type string `json:"type"`
		OID  string `json:"oid"`
		Size int    `json:"size"`
		Path string `json:"path"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	s.mu.Lock()
	entries := []entry{}
	dirs := map[string]bool{}
	for p, f := range rp.commits[commit] {
		e := entry{Type: "file", OID: GitBlobID(f.data), Size: len(f.data), Path: p}
		if f.lfs {
			e.LFS = &lfs{OID: SHA256(f.data), Size: len(f.data), PointerSize: 134}
		}
		entries = append(entries, e)
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	s.mu.Unlock()
	for d := range dirs {
		entries = append(entries, entry{Type: "directory", OID: GitBlobID([]byte(d)), Path: d})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(entries)
}

// serveCDN answers GETs of LFS content by sha256.
func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	s.record("cdn", r)
	sum, ok := strings.CutPrefix(r.URL.Path, "/blobs/")
	s.mu.Lock()
	b, found := s.blobs[sum]
	s.mu.Unlock()
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	s.serveContent(w, r, r.URL.Query().Get("file"), b)
}

// serveContent serves a file's bytes with Range support, applying the
// faults injected for it.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, filePath string, b []byte) {
	s.mu.Lock()
	n, drop := s.drops[filePath]
	if drop && r.Method == http.MethodGet {
		delete(s.drops, filePath)
	}
	bad := s.corrupt[filePath]
	s.mu.Unlock()
	if bad && len(b) > 0 {
		b = slices.Clone(b)
		b[0] ^= 0xff
	}
	if drop && r.Method == http.MethodGet {
		dropConnection(w, r, b, n)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

// dropConnection announces the whole body (from the Range start, if any),
// sends n bytes of it and closes the connection.
func dropConnection(w http.ResponseWriter, r *http.Request, b []byte, n int) {
	start := 0
	if v, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes="); ok {
		if i, err := strconv.Atoi(strings.TrimSuffix(v, "-")); err == nil && i <= len(b) {
			start = i
		}
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	status := "200 OK"
	extra := ""
	if start > 0 {
		status = "206 Partial Content"
		extra = fmt.Sprintf("Content-Range: bytes %d-%d/%d\r\n", start, len(b)-1, len(b))
	}
	fmt.Fprintf(buf, "HTTP/1.1 %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n%s\r\n", status, len(b)-start, extra)
	buf.Write(b[start:min(start+n, len(b))])
	buf.Flush()
}
