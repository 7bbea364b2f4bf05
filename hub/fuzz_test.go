package hub

import (
	"net/http"
	"strings"
	"testing"
)

// The Hub's responses become paths in the cache: every parser below must
// refuse what would escape it, and never panic. The seeds run as tests.

func FuzzParseRepoInfo(f *testing.F) {
	sha := strings.Repeat("0123456789", 4)
	for _, s := range []string{
		`{"_id":"1","id":"facebook/opt-1.3b","sha":"` + sha + `","private":false,"gated":false,"siblings":[{"rfilename":"config.json"},{"rfilename":"model.safetensors"}]}`,
		`{"id":"meta/gated","sha":"` + sha + `","gated":"manual","siblings":[]}`,
		`{"sha":"` + sha + `","siblings":[{"rfilename":"../../etc/passwd"}]}`,
		`{"sha":"` + sha + `","siblings":[{"rfilename":"/abs"}]}`,
		`{"sha":"main","siblings":[]}`,
		`{"sha":"` + sha + `","disabled":true}`,
		`{"sha":"` + sha + `","siblings":[{"rfilename":"a//b"}]}`,
		`[]`, `null`, ``, `{"sha": 3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseRepoInfo(b)
		if err != nil {
			return
		}
		if !isCommit(info.SHA) {
			t.Errorf("accepted sha %q", info.SHA)
		}
		for _, n := range info.Files {
			if checkRelPath(n) != nil || strings.Contains("/"+n+"/", "/../") {
				t.Errorf("accepted file %q", n)
			}
		}
		modelFiles(info.Files)
		datasetFiles(info.Files)
	})
}

func FuzzParseFileMeta(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, c := range []struct {
		status                                    int
		commit, etag, linked, size, length, where string
	}{
		{200, strings.Repeat("1", 40), `"0123abcd"`, "", "", "42", ""},
		{302, strings.Repeat("1", 40), `"0123abcd"`, `"` + sum + `"`, "1000", "0", "https://cdn.example/x"},
		{200, strings.Repeat("1", 40), `W/"weak"`, "", "", "5", ""},
		{302, "c", `"e"`, "", "", "", ""},
		{200, "", `"e"`, "", "", "1", ""},
		{200, "c", `"../../x"`, "", "", "1", ""},
		{200, "c", `"a/b"`, "", "", "-1", ""},
		{200, "c", `""`, "", "", "1", ""},
	} {
		f.Add(c.status, c.commit, c.etag, c.linked, c.size, c.length, c.where)
	}
	f.Fuzz(func(t *testing.T, status int, commit, etag, linked, size, length, where string) {
		h := http.Header{}
		for k, v := range map[string]string{headerRepoCommit: commit, "ETag": etag, headerLinkedETag: linked,
			headerLinkedSize: size, "Content-Length": length, "Location": where} {
			if v != "" {
				h.Set(k, v)
			}
		}
		m, err := parseFileMeta(h, status, "https://hub.example/r/resolve/c/f")
		if err != nil {
			return
		}
		if checkETag(m.ETag) != nil || strings.ContainsAny(m.ETag, `/\`) || m.ETag == ".." || m.Size < 0 || m.Location == "" {
			t.Errorf("accepted %+v", m)
		}
		if m.SHA256 != "" && !isSHA256(m.SHA256) {
			t.Errorf("sha256 %q", m.SHA256)
		}
	})
}

func FuzzParseIndex(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"total_size":1},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{"a":"../x.bin"}}`,
		`{"weight_map":{}}`,
		`{"weight_map":{"a":"sub/shard.bin"}}`,
		`{}`, `[`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		shards, err := parseIndex(b)
		if err != nil {
			return
		}
		if len(shards) == 0 {
			t.Error("no shards and no error")
		}
		for _, s := range shards {
			if checkRelPath(s) != nil {
				t.Errorf("accepted shard %q", s)
			}
		}
	})
}

func FuzzHeaderValues(f *testing.F) {
	for _, s := range []string{"bytes 100-199/200", "bytes 0-0/1", "bytes */200", "items 1-2/3", "bytes -5-9/10", "", `W/"abc"`, `"` + strings.Repeat("f", 64) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := contentRangeStart(s); err == nil && n < 0 {
			t.Errorf("contentRangeStart(%q) = %d", s, n)
		}
		e := normalizeETag(s)
		if checkETag(e) == nil && (strings.ContainsAny(e, `/\"`) || e == "." || e == "..") {
			t.Errorf("blob name %q accepted from %q", e, s)
		}
		if ValidID(s) == nil && (strings.Contains(s, "..") || strings.Count(s, "/") > 1 || strings.HasPrefix(s, "/")) {
			t.Errorf("ValidID accepted %q", s)
		}
		if id := ModelID(s); id != s && !strings.HasPrefix(id, "facebook/opt-") {
			t.Errorf("ModelID(%q) = %q", s, id)
		}
	})
}
