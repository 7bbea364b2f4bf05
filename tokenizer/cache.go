package tokenizer

import (
	"runtime"
	"strings"
	"sync"
)

// wordCache remembers the ids of words already merged (Hugging Face keeps
// the same kind of cache). Ids live in one arena; the cache is emptied when
// it holds maxCacheWords words or maxCacheIDs ids, which bounds its memory
// at a few MB. Not safe for concurrent use: each encodeState owns one.
type wordCache struct {
	index map[string]span
	arena []int32
}

type span struct{ off, n uint32 }

const (
	maxCacheWords  = 1 << 16
	maxCacheIDs    = 1 << 19
	maxCachedBytes = 128 // longer words are merged every time
)

func (c *wordCache) get(w string) ([]int32, bool) {
	s, ok := c.index[w]
	if !ok {
		return nil, false
	}
	return c.arena[s.off : s.off+s.n], true
}

func (c *wordCache) put(w string, ids []int32) {
	if len(w) > maxCachedBytes {
		return
	}
	if c.index == nil || len(c.index) >= maxCacheWords || len(c.arena)+len(ids) > maxCacheIDs {
		c.index = make(map[string]span, 1024)
		c.arena = c.arena[:0]
	}
	// The key is copied: w is a slice of the caller's text.
	c.index[strings.Clone(w)] = span{uint32(len(c.arena)), uint32(len(ids))}
	c.arena = append(c.arena, ids...)
}

// encodeState is the mutable part of encoding: the word cache and scratch
// buffers. A Tokenizer keeps a statePool of them so that Encode is safe for
// concurrent use; EncodeBatch gives each worker its own.
type encodeState struct {
	cache wordCache
	syms  []int32
	merge mergeScratch
	segs  []segment
	// pieces and spare are the pre-tokenizer's scratch lists.
	pieces, spare []string
}

// segment is a piece of the input: text for the model, or an added token.
type segment struct {
	text    string
	id      int32 // the added token's id, or -1 for text
	atStart bool  // text that starts at the beginning of the input
}

// statePool keeps encode states (with their warm word caches) between
// calls. Unlike a sync.Pool it is not emptied by garbage collection; it
// keeps at most 2*GOMAXPROCS states, a few MB each at most.
type statePool struct {
	mu   sync.Mutex
	free []*encodeState
}

func (p *statePool) get() *encodeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		st := p.free[n-1]
		p.free = p.free[:n-1]
		return st
	}
	return &encodeState{}
}

func (p *statePool) put(st *encodeState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < 2*runtime.GOMAXPROCS(0) {
		p.free = append(p.free, st)
	}
}
