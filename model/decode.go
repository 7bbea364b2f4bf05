package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// Cache is a KV cache for incremental decoding of B rows up to Tmax
// positions, with the scratch buffers for chunks of up to MaxChunk new
// positions per step.
type Cache struct {
	B, Tmax, MaxChunk int
	// Len is the number of positions filled so far.
	Len int

	// k and v hold each layer's keys and values: OPT's [B,Tmax,H], the
	// LLaMA family's [B,NKV,Tmax,HS] (sized by the KV heads).
	k, v      []kernels.Buffer
	mask      kernels.Buffer // I32 [B,Tmax]
	hostMask  []int32        // [B,Tmax]
	realCount []int32        // [B] real tokens so far (for positions)

	// The scratch of one chunk (the family's layoutCache says which exist).
	ids, pos         kernels.Buffer // I32 [B·chunk]
	cos, sin         kernels.Buffer // LLaMA: the rotary tables [ropeRows(Tmax),HS/2]
	x, h, ln, tmp    kernels.Buffer // [B·chunk,H]; h is the attention output (LLaMA: [B·chunk,NH·HS])
	qkv, qkvRaw      kernels.Buffer // [B·chunk,3H] (LLaMA: (NH+2·NKV)·HS; qkvRaw before Qwen3's q/k norm)
	fch, act         kernels.Buffer // [B·chunk,F] (LLaMA: fch [B·chunk,2F] gate|up, act [B·chunk,F])
	emb, y           kernels.Buffer // [B·chunk,P]
	mean, rstd       kernels.Buffer // [B·chunk]
	qRstd, kRstd     kernels.Buffer // [B·chunk,NH], [B·chunk,NKV] (Qwen3)
	last, lastLogits kernels.Buffer // [B,P], [B,V]
	logits           kernels.Buffer // [B·chunk,V], allocated on first AllLogits

	dev  kernels.Device
	bufs []kernels.Buffer // everything allocated, for Free
}

// alloc allocates a cache buffer, keeping the first error in *err (later
// calls then return nil without allocating).
func (kc *Cache) alloc(dt kernels.DType, n int, err *error) kernels.Buffer {
	if *err != nil {
		return nil
	}
	b, e := kc.dev.Alloc(dt, n)
	if e != nil {
		*err = e
		return nil
	}
	kc.bufs = append(kc.bufs, b)
	return b
}

// Free releases the cache's buffers; kc must not be used afterwards.
func (kc *Cache) Free() {
	if kc == nil {
		return
	}
	for _, b := range kc.bufs {
		kc.dev.Free(b)
	}
	kc.bufs = nil
}

// Bytes is the device memory the cache holds, in bytes.
func (kc *Cache) Bytes() int {
	n := 0
	for _, b := range kc.bufs {
		n += b.Len() * b.DType().Size()
	}
	return n
}

// NewCache allocates a KV cache for b rows of up to tmax positions, decoding
// at most maxChunk positions per Decode call (the prompt length for prefill).
func (m *Model) NewCache(b, tmax, maxChunk int) (*Cache, error) {
	c, d := m.Config, m.Dev
	if tmax > c.MaxPositions {
		return nil, fmt.Errorf("model: cache length %d exceeds max_position_embeddings %d", tmax, c.MaxPositions)
	}
	if maxChunk < 1 || maxChunk > tmax {
		return nil, fmt.Errorf("model: chunk size %d must be in [1, %d]", maxChunk, tmax)
	}
	kc := &Cache{B: b, Tmax: tmax, MaxChunk: maxChunk, dev: d}
	var err error
	c.family().layoutCache(c, kc, func(dt kernels.DType, n int) kernels.Buffer { return kc.alloc(dt, n, &err) })
	kc.hostMask = make([]int32, b*tmax)
	kc.realCount = make([]int32, b)
	if err != nil {
		kc.Free()
		return nil, fmt.Errorf("model: KV cache for %d rows of %d positions: %w", b, tmax, err)
	}
	if kc.cos != nil {
		fillRope(d, kc.cos, kc.sin, m.ropeInv, ropeRows(tmax))
	}
	return kc, nil
}

// Reset empties the cache for a new batch of sequences.
func (kc *Cache) Reset() {
	kc.Len = 0
	clear(kc.hostMask)
	clear(kc.realCount)
}

// DecodeOutput selects what Decode returns.
type DecodeOutput int

const (
	// LastLogits returns the logits of the last new position of each row: [B,V].
	LastLogits DecodeOutput = iota
	// AllLogits returns the logits of every new position: [B,tn,V].
	AllLogits
)

// Decode appends tn positions per row (ids and mask are [B,tn]; a nil mask
// means all real) to the cache and returns logits as out selects. It equals
// the full Forward over the whole sequence so far, position by position.
func (m *Model) Decode(kc *Cache, ids, mask []int32, tn int, out DecodeOutput) ([]float32, error) {
	c, d, p := m.Config, m.Dev, m.Params
	B := kc.B
	if tn < 1 || tn > kc.MaxChunk {
		return nil, fmt.Errorf("model: decode chunk %d must be in [1, %d]", tn, kc.MaxChunk)
	}
	if kc.Len+tn > kc.Tmax {
		return nil, fmt.Errorf("model: KV cache full: %d + %d positions > %d", kc.Len, tn, kc.Tmax)
	}
	if len(ids) != B*tn || (mask != nil && len(mask) != B*tn) {
		return nil, fmt.Errorf("model: decode wants [%d,%d] ids and mask", B, tn)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= c.VocabSize {
			return nil, fmt.Errorf("model: token id %d at position %d is outside the vocabulary [0, %d)", id, i, c.VocabSize)
		}
	}
	N, P, V, t0 := B*tn, c.WordEmbedProjDim, c.VocabSize, kc.Len
	if m.adapter != nil {
		if err := m.adapter.Reserve(N); err != nil {
			return nil, err
		}
	}
	var all kernels.Buffer
	if out == AllLogits {
		var err error
		if all, err = kc.allLogits(V); err != nil {
			return nil, err
		}
	}
	pos := c.family().positions(mask, B, tn, kc.realCount)
	for b := range B {
		for j := range tn {
			mj := int32(1)
			if mask != nil {
				mj = mask[b*tn+j]
			}
			kc.hostMask[b*kc.Tmax+t0+j] = mj
			kc.realCount[b] += mj
		}
	}
	d.WriteI32(kc.mask, kc.hostMask)
	d.WriteI32(kc.ids.Slice(0, N), ids)
	d.WriteI32(kc.pos.Slice(0, N), pos)

	y := c.family().decode(m, kc, tn, t0)
	kc.Len += tn

	if out == AllLogits {
		logits := all.Slice(0, N*V)
		d.MatmulForward(logits, y, p.LMHead, nil, N, P, V)
		res := make([]float32, N*V)
		d.ReadF32(res, logits)
		return res, nil
	}
	for b := range B { // gather each row's last position
		d.Copy(kc.last.Slice(b*P, P), y.Slice((b*tn+tn-1)*P, P))
	}
	d.MatmulForward(kc.lastLogits, kc.last, p.LMHead, nil, B, P, V)
	res := make([]float32, B*V)
	d.ReadF32(res, kc.lastLogits)
	return res, nil
}

// allLogits returns the [B·MaxChunk,V] logits buffer, allocated on first use.
func (kc *Cache) allLogits(v int) (kernels.Buffer, error) {
	if kc.logits == nil {
		var err error
		if kc.logits = kc.alloc(kernels.F32, kc.B*kc.MaxChunk*v, &err); err != nil {
			return nil, fmt.Errorf("model: logits of a %dx%d chunk: %w", kc.B, kc.MaxChunk, err)
		}
	}
	return kc.logits, nil
}
