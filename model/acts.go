package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// layerActs are the saved activations of one decoder layer for a [B,T]
// batch (N = B·T rows). Which buffers hold what depends on the family and,
// for OPT, the LayerNorm placement; see optBufs and llamaBufs (where
// ln*Rstd are the RMSNorms', qkv and atty have the packed GQA widths, fch
// is gate|up [N,2F] and fchAct silu(gate)·up). With a bf16
// store (Acts.store) ln1, ln2, atty and fchAct (for relu also fch, which
// it aliases) are BF16.
type layerActs struct {
	ln1, ln1Mean, ln1Rstd kernels.Buffer // [N,H], [N], [N]
	qkv                   kernels.Buffer // [N,3H]
	qkvRaw, qRstd, kRstd  kernels.Buffer // Qwen3: qkv before q/k norm, the norms' rstd [N,NH], [N,NKV]
	att                   kernels.Buffer // [B,NH,T,T] probabilities (nil with flash attention)
	lse                   kernels.Buffer // [B,NH,T] log-sum-exp of the scores (flash attention only)
	atty                  kernels.Buffer // [N,H] attention output (before out_proj)
	attnOut               kernels.Buffer // [N,H] out_proj output (after dropout)
	s1                    kernels.Buffer // [N,H] r + attnOut
	ln2, ln2Mean, ln2Rstd kernels.Buffer // [N,H] (pre-LN only), [N], [N]
	fch                   kernels.Buffer // [N,F] fc1 output (pre-activation)
	fchAct                kernels.Buffer // [N,F] activation output (aliases fch for relu)
	fc2o                  kernels.Buffer // [N,H] fc2 output (after dropout)
	s2                    kernels.Buffer // [N,H] post-LN only: ln1 + fc2o
	drop1, drop2          kernels.Buffer // [N,H] dropout scales (training with dropout only)
}

// Acts are the buffers of one forward/backward pass over a [B,T] batch.
//
// Every buffer below is a view of exactly the size its comment gives, and a
// prefix of one of the device allocations in backing (ReuseActs keeps those
// when they are large enough for a new shape). Every kernel indexes its
// buffers contiguously by the B, T it is given, and every buffer is written
// by the pass before it is read, so a prefix view of a larger or previously
// used allocation computes exactly what a fresh one does.
type Acts struct {
	B, T int
	opts ActsOptions

	ids, mask, pos, targets kernels.Buffer // I32 [B,T]
	hasMask, hasTargets     bool

	emb    kernels.Buffer   // [N,P] token embeddings
	embIn  kernels.Buffer   // [N,H] after project_in (emb when P == H)
	posEmb kernels.Buffer   // [N,H]
	resid  []kernels.Buffer // L+1 × [N,H]: the input of each layer and the decoder output
	layers []layerActs      // L, or 1 shared by all layers with gradient checkpointing

	fin              kernels.Buffer // [N,H] after the final LayerNorm (resid[L] without one)
	finMean, finRstd kernels.Buffer // [N]
	y                kernels.Buffer // [N,P] final hidden state (after project_out)
	logits           kernels.Buffer // [N,V]; overwritten by dlogits in Backward
	losses           kernels.Buffer // [N] per-position cross-entropy
	values           kernels.Buffer // [N] value head outputs
	dA, dB, dC       kernels.Buffer // [N,H] gradient scratch
	dqkv             kernels.Buffer // [N,3H]
	dfch             kernels.Buffer // [N,F] (LLaMA: [N,2F])
	datty, dact      kernels.Buffer // LLaMA: [N,NH·HS], [N,F]
	dy, demb         kernels.Buffer // [N,P]
	dlosses, dvalues kernels.Buffer // [N]

	// store is the bf16 store: with BF16 weights, training without
	// gradient checkpointing and no adapter, the tensors the backward pass
	// reads only as the input of a bf16 matmul — ln1, ln2, atty, fchAct —
	// are kept rounded to BF16. The matmul rounds them to bf16 itself, so
	// the gradients are bit for bit those of keeping them F32 (but for a
	// ReLU output below 2^-134, which rounds to zero and then passes no
	// gradient), at half their memory; PyTorch's autocast keeps them bf16
	// too. The forward computes them in the F32 working buffers wsH, wsF
	// and keeps them rounded; the backward widens them there before use.
	store    bool
	wsH, wsF kernels.Buffer // [N,H], [N,F] F32 working buffers of the store (LLaMA: [N,max(H,NH·HS)], [N,F])

	// cos, sin are the LLaMA family's rotary tables [ropeRows(T),HS/2]
	// (see ropeRows); their first ropeRows rows hold the tables of the
	// inverse frequencies ropeInv (Model.ensureRope), which survive
	// ReuseActs.
	cos, sin kernels.Buffer
	ropeRows int
	ropeInv  []float32

	seed        uint64
	logitsLive  bool
	hostTargets []int32

	// backing are the allocations on dev behind the views above, in the
	// order layoutActs asks for them; their lengths are capacities.
	dev     kernels.Device
	backing []kernels.Buffer
}

// ActsOptions configure activation buffers.
type ActsOptions struct {
	// Train allocates the gradient scratch Backward needs.
	Train bool
	// Dropout applies Config.Dropout to the residual branches (training
	// mode); without it the pass is deterministic (evaluation mode).
	Dropout bool
	// Checkpoint keeps only each layer's input and recomputes the layer
	// during Backward (gradient checkpointing).
	Checkpoint bool
	// NoLogits skips the lm_head (value-only models: reward and critic).
	NoLogits bool
	// F32Acts keeps every activation F32 even where the bf16 store would
	// keep some BF16 (see Acts; the gradients are the same).
	F32Acts bool
}

// WeightsInfo is what the layout of activation buffers needs to know of a
// model beyond its config: the parameters' element type, whether an
// adapter (LoRA) is attached, and whether the device runs flash attention.
// Attach adapters before making Acts.
type WeightsInfo struct {
	DType   kernels.DType
	Adapter bool
	// FlashAttention: the device implements kernels.FlashAttention, so
	// each layer keeps the log-sum-exp lse[B,NH,T] of its attention
	// scores instead of the probabilities att[B,NH,T,T], and the
	// attention runs through the flash kernels.
	FlashAttention bool
}

// WeightsInfo describes m's parameters and device as ActsBytes needs them.
func (m *Model) WeightsInfo() WeightsInfo {
	_, fa := m.Dev.(kernels.FlashAttention)
	return WeightsInfo{DType: m.DType(), Adapter: m.adapter != nil, FlashAttention: fa}
}

// attnStore returns the buffer a layer keeps for its attention's backward
// pass: the probabilities att [B,NH,T,T], or with flash attention the
// log-sum-exp lse [B,NH,T].
func attnStore(w WeightsInfo, f32 func(int) kernels.Buffer, b, nh, t int) (att, lse kernels.Buffer) {
	if w.FlashAttention {
		return nil, f32(b * nh * t)
	}
	return f32(b * nh * t * t), nil
}

// bf16Store reports whether activations laid out with opts for weights w
// keep the bf16 store (see Acts).
func bf16Store(w WeightsInfo, opts ActsOptions) bool {
	return w.DType == kernels.BF16 && opts.Train && !opts.Checkpoint && !opts.F32Acts && !w.Adapter
}

// actsAlloc is how a family's layoutActs takes buffers: F32 and I32 ones,
// and kept, the dtype of the tensors the bf16 store keeps (BF16 with the
// store, else F32).
type actsAlloc struct {
	f32, i32, kept func(n int) kernels.Buffer
}

// startActs begins every family's layoutActs: it resets a for [b,t] and
// opts (only dev, backing and the rope tables' bookkeeping survive; every
// flag starts cleared), sizes the residual stream (NumLayers+1) and the
// layers (one under Checkpoint), lays out the token inputs (ids, mask,
// positions, targets) and returns the allocators.
func startActs(c *Config, a *Acts, b, t int, opts ActsOptions, w WeightsInfo, buf func(kernels.DType, int) kernels.Buffer) actsAlloc {
	al := actsAlloc{
		f32: func(k int) kernels.Buffer { return buf(kernels.F32, k) },
		i32: func(k int) kernels.Buffer { return buf(kernels.I32, k) },
	}
	store := bf16Store(w, opts)
	al.kept = al.f32
	if store {
		al.kept = func(k int) kernels.Buffer { return buf(kernels.BF16, k) }
	}
	nl := c.NumLayers
	if opts.Checkpoint {
		nl = 1
	}
	*a = Acts{
		B: b, T: t, opts: opts, store: store,
		dev: a.dev, backing: a.backing,
		hostTargets: a.hostTargets[:0],
		resid:       reuse(a.resid, c.NumLayers+1),
		layers:      reuse(a.layers, nl),
		ropeRows:    a.ropeRows, ropeInv: a.ropeInv,
	}
	n := b * t
	a.ids, a.mask, a.pos, a.targets = al.i32(n), al.i32(n), al.i32(n), al.i32(n)
	return al
}

// NewActs allocates the activation buffers for batches of shape [B,T].
// An allocation that fails frees what this call allocated and returns the
// error.
func (m *Model) NewActs(b, t int, opts ActsOptions) (*Acts, error) {
	return m.ReuseActs(nil, b, t, opts)
}

// allocFailure carries an Alloc error out of layoutActs.
type allocFailure struct{ err error }

// ReuseActs returns activation buffers for batches of shape [B,T], reusing
// the device memory of a where it can. When a is not nil, lives on m's
// device and was made with the same opts (normally by m, or by a WithParams
// view of it), a itself is returned, re-laid out for [B,T]: each of its
// buffers is kept (as a prefix view) when it is large enough and replaced by
// a new, exactly sized allocation when it is not, so a loop over varying
// shapes soon stops allocating; a then holds, per buffer, the largest size
// asked for. Otherwise (a is nil, or other options) the result is a fresh
// NewActs and a is left alone.
//
// When an allocation fails, ReuseActs returns the error and a must not be
// used again (Free it).
//
// The result carries nothing over from a's last pass: Logits, Losses,
// Values and Backward need a new Forward. Reusing a invalidates every
// earlier use of it; a single Acts must not serve two passes at once.
//
//	a = m.ReuseActs(a, b, t, opts) // instead of m.NewActs(b, t, opts)
func (m *Model) ReuseActs(a *Acts, b, t int, opts ActsOptions) (_ *Acts, err error) {
	if a == nil || a.dev != m.Dev || a.opts != opts {
		a = &Acts{dev: m.Dev}
	}
	i := 0
	var fresh []kernels.Buffer // allocated by this call
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(allocFailure)
			if !ok {
				panic(r)
			}
			for _, bk := range fresh {
				m.Dev.Free(bk)
			}
			err = fmt.Errorf("model: activations for a batch of %dx%d: %w", b, t, f.err)
		}
	}()
	buf := func(dt kernels.DType, n int) kernels.Buffer {
		if i == len(a.backing) {
			a.backing = append(a.backing, nil)
		}
		if bk := a.backing[i]; bk == nil || bk.DType() != dt || bk.Len() < n {
			nb, err := m.Dev.Alloc(dt, n)
			if err != nil {
				panic(allocFailure{err})
			}
			fresh = append(fresh, nb)
			m.Dev.Free(bk)
			a.backing[i] = nb
		}
		v := a.backing[i].Slice(0, n)
		i++
		return v
	}
	m.layoutActs(a, b, t, opts, m.WeightsInfo(), buf)
	for _, bk := range a.backing[i:] { // a structure change (Config.Dropout toggled) left these unused
		m.Dev.Free(bk)
	}
	clear(a.backing[i:])
	a.backing = a.backing[:i]
	return a, nil
}

// Free releases a's buffers; a must not be used afterwards.
func (a *Acts) Free() {
	if a == nil {
		return
	}
	for _, b := range a.backing {
		a.dev.Free(b)
	}
	a.backing = nil
}

// Bytes is the device memory, in bytes, that a holds: its capacity, which
// after ReuseActs may exceed what its current shape uses.
func (a *Acts) Bytes() int {
	n := 0
	for _, b := range a.backing {
		n += b.Len() * b.DType().Size()
	}
	return n
}

// layoutActs (re)sets every field of a for shape [b,t], taking each
// distinct buffer from buf in a fixed order (the family's layout). Only dev
// and backing survive; every flag starts cleared.
func (m *Model) layoutActs(a *Acts, b, t int, opts ActsOptions, w WeightsInfo, buf func(kernels.DType, int) kernels.Buffer) {
	m.Config.family().layoutActs(m, a, b, t, opts, w, buf)
}

// reuse returns s resized to n elements, all zero, keeping its array when
// it is large enough.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// layer returns the saved activations of layer l.
func (a *Acts) layer(l int) *layerActs {
	if a.opts.Checkpoint {
		return &a.layers[0]
	}
	return &a.layers[l]
}

// ReuseActsIn is ReuseActs for a slot that owns one set of buffers: *slot
// (nil at first) is reused for shape s, or replaced by a new set (the old
// one freed) when ReuseActs cannot reuse it; on an error the set is freed and
// *slot cleared. It returns the new *slot.
func (m *Model) ReuseActsIn(slot **Acts, s ActsShape) (*Acts, error) {
	prev := *slot
	a, err := m.ReuseActs(prev, s.B, s.T, s.Opts)
	if err != nil {
		prev.Free()
		*slot = nil
		return nil, err
	}
	if a != prev {
		prev.Free()
	}
	*slot = a
	return a, nil
}
