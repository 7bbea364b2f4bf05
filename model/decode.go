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

	k, v      []kernels.Buffer // L × [B,Tmax,H]
	mask      kernels.Buffer   // I32 [B,Tmax]
	hostMask  []int32          // [B,Tmax]
	realCount []int32          // [B] real tokens so far (for positions)

	ids, pos         kernels.Buffer // I32 [B·chunk]
	x, h, ln, tmp    kernels.Buffer // [B·chunk,H]
	qkv              kernels.Buffer // [B·chunk,3H]
	fch              kernels.Buffer // [B·chunk,F]
	emb, y           kernels.Buffer // [B·chunk,P]
	mean, rstd       kernels.Buffer // [B·chunk]
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
	H, F, P, V := c.HiddenSize, c.FFNDim, c.WordEmbedProjDim, c.VocabSize
	n := b * maxChunk
	kc := &Cache{B: b, Tmax: tmax, MaxChunk: maxChunk, dev: d}
	var err error
	f32 := func(k int) kernels.Buffer { return kc.alloc(kernels.F32, k, &err) }
	for range c.NumLayers {
		kc.k = append(kc.k, f32(b*tmax*H))
		kc.v = append(kc.v, f32(b*tmax*H))
	}
	kc.mask = kc.alloc(kernels.I32, b*tmax, &err)
	kc.hostMask = make([]int32, b*tmax)
	kc.realCount = make([]int32, b)
	kc.ids, kc.pos = kc.alloc(kernels.I32, n, &err), kc.alloc(kernels.I32, n, &err)
	kc.x, kc.h, kc.ln, kc.tmp = f32(n*H), f32(n*H), f32(n*H), f32(n*H)
	kc.qkv, kc.fch = f32(3*n*H), f32(n*F)
	kc.emb, kc.y = f32(n*P), f32(n*P)
	kc.mean, kc.rstd = f32(n), f32(n)
	kc.last, kc.lastLogits = f32(b*P), f32(b*V)
	if err != nil {
		kc.Free()
		return nil, fmt.Errorf("model: KV cache for %d rows of %d positions: %w", b, tmax, err)
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
	N, H, P, V, t0 := B*tn, c.HiddenSize, c.WordEmbedProjDim, c.VocabSize, kc.Len
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
	pos := Positions(mask, B, tn, kc.realCount)
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

	sl := func(b kernels.Buffer, cols int) kernels.Buffer { return b.Slice(0, N*cols) }
	emb, x, h, ln, tmp := sl(kc.emb, P), sl(kc.x, H), sl(kc.h, H), sl(kc.ln, H), sl(kc.tmp, H)
	qkv, fch, y := sl(kc.qkv, 3*H), sl(kc.fch, c.FFNDim), sl(kc.y, P)
	mean, rstd := sl(kc.mean, 1), sl(kc.rstd, 1)

	d.EmbeddingForward(emb, kc.ids.Slice(0, N), p.EmbedToks, N, P)
	embIn := emb
	if c.HasProjections() {
		d.MatmulForward(tmp, emb, p.ProjectIn, nil, N, P, H)
		embIn = tmp
	}
	d.EmbeddingForward(ln, kc.pos.Slice(0, N), p.EmbedPos, N, H)
	d.Add(x, embIn, ln, N*H)
	for l := range c.NumLayers {
		m.layerDecode(kc, l, x, h, ln, tmp, qkv, fch, mean, rstd, tn, t0)
	}
	kc.Len += tn

	fin := x
	if c.HasFinalLayerNorm() {
		d.LayerNormForward(ln, mean, rstd, x, p.FinalLNW, p.FinalLNB, N, H, lnEps)
		fin = ln
	}
	if c.HasProjections() {
		d.MatmulForward(y, fin, p.ProjectOut, nil, N, H, P)
	} else {
		y = fin
	}
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

// layerDecode is layerForward for tn new positions against the KV cache,
// without saving anything for a backward pass. x is the residual stream
// [B·tn,H], updated in place.
func (m *Model) layerDecode(kc *Cache, l int, x, h, ln, tmp, qkv, fch, mean, rstd kernels.Buffer, tn, t0 int) {
	c, d, w := m.Config, m.Dev, &m.Params.Layers[l]
	B, N, H, F := kc.B, kc.B*tn, c.HiddenSize, c.FFNDim
	attnIn := x
	if c.DoLayerNormBefore {
		d.LayerNormForward(ln, mean, rstd, x, w.AttnLNW, w.AttnLNB, N, H, lnEps)
		attnIn = ln
	}
	m.linearForward(l, SiteQKV, qkv, attnIn, w.QKVW, w.QKVB, N, H, 3*H)
	d.AttentionDecode(h, qkv, kc.k[l], kc.v[l], kc.mask, B, tn, t0, kc.Tmax, c.NumHeads, c.HeadSize())
	m.linearForward(l, SiteOut, tmp, h, w.OutW, w.OutB, N, H, H)
	d.Add(x, x, tmp, N*H) // s1
	ffnIn := ln
	if c.DoLayerNormBefore {
		d.LayerNormForward(ln, mean, rstd, x, w.FFNLNW, w.FFNLNB, N, H, lnEps)
	} else {
		d.LayerNormForward(ln, mean, rstd, x, w.AttnLNW, w.AttnLNB, N, H, lnEps)
	}
	m.linearForward(l, SiteFC1, fch, ffnIn, w.FC1W, w.FC1B, N, H, F)
	m.activationForward(fch, fch, N*F)
	m.linearForward(l, SiteFC2, tmp, fch, w.FC2W, w.FC2B, N, F, H)
	if c.DoLayerNormBefore {
		d.Add(x, x, tmp, N*H)
		return
	}
	d.Add(tmp, ln, tmp, N*H) // s2 = ln1 + fc2o
	d.LayerNormForward(x, mean, rstd, tmp, w.FFNLNW, w.FFNLNB, N, H, lnEps)
}
