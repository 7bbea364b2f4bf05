package tensor

// The torch side of pytorch_model.bin decoding: the globals a state-dict pickle may name, the
// persistent ids of its storages, and the checks that turn rebuilt tensors into entries.

import (
	"errors"
	"fmt"
	"math"
	"math/big"

	"github.com/nlpodyssey/gopickle/types"
)

// storageTypes maps torch storage classes to element types.
var storageTypes = map[string]DType{
	"FloatStorage":    F32,
	"HalfStorage":     F16,
	"BFloat16Storage": BF16,
	"DoubleStorage":   F64,
	"LongStorage":     I64,
	"IntStorage":      I32,
	"ShortStorage":    I16,
	"CharStorage":     I8,
	"ByteStorage":     U8,
	"BoolStorage":     BOOL,
	"UntypedStorage":  U8,
}

// storageClass stands for a torch.*Storage class in a persistent id.
type storageClass struct {
	name  string // module.name as the pickle names it
	dtype DType
}

// Call refuses a pickle that calls a storage class: a state dict only names
// one in a persistent id.
func (c *storageClass) Call(...any) (any, error) {
	return nil, fmt.Errorf("refusing to execute %s from the pickle (a state dict only names storage classes in persistent ids)", c.name)
}

// pyGlobal is any other global a pickle names (os.system, builtins.eval,
// ...). It is inert: calling or instantiating it is refused with an error
// that names it, and a state dict that holds it is refused where a tensor
// was expected. Nothing a pickle names is ever executed.
type pyGlobal struct {
	module, name string
}

func (g *pyGlobal) String() string { return g.module + "." + g.name }

// Call refuses REDUCE, INST and OBJ on the global.
func (g *pyGlobal) Call(...any) (any, error) {
	return nil, fmt.Errorf("refusing to execute %s from the pickle (a state dict only calls torch's tensor-rebuilding functions)", g)
}

// PyNew refuses NEWOBJ, NEWOBJ_EX and copy_reg._reconstructor on the global.
func (g *pyGlobal) PyNew(...any) (any, error) {
	return nil, fmt.Errorf("refusing to instantiate %s from the pickle (a state dict only calls torch's tensor-rebuilding functions)", g)
}

// describe names a pickled value in words, as Python would, for error
// messages: "the global os.system", "a list", "an int".
func describe(v any) string {
	switch x := v.(type) {
	case *pyGlobal:
		return "the global " + x.String()
	case *storageClass:
		return "the storage class " + x.name
	case *binTensor:
		return "a tensor"
	case *binStorage:
		return "a storage"
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int, *big.Int:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a str"
	case []byte, *types.ByteArray:
		return "a bytes object"
	case *types.Tuple:
		return "a tuple"
	case *types.List:
		return "a list"
	case *types.Dict, *types.OrderedDict:
		return "a dict"
	case *types.Set, *types.FrozenSet:
		return "a set"
	case types.Callable:
		return "a callable"
	}
	return fmt.Sprintf("a %T", v)
}

// binStorage is one storage of a .bin file: numel elements of dtype in a region of the file.
type binStorage struct {
	key   string
	dtype DType
	numel int64
	src   *region
}

// binTensor is what torch._utils._rebuild_tensor_v2 builds: a strided view of a storage.
type binTensor struct {
	storage *binStorage
	offset  int64 // in elements
	shape   []int
	strides []int64
}

// rebuildTensor is torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
// requires_grad, backward_hooks[, metadata]) and the older _rebuild_tensor(storage, storage_offset,
// size, stride).
type rebuildTensor struct{}

func (rebuildTensor) Call(args ...any) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("_rebuild_tensor: %d arguments, want at least 4", len(args))
	}
	st, ok := args[0].(*binStorage)
	if !ok {
		return nil, fmt.Errorf("_rebuild_tensor: storage argument is %s", describe(args[0]))
	}
	off, ok := pyInt(args[1])
	if !ok || off < 0 {
		return nil, errors.New("_rebuild_tensor: bad storage offset")
	}
	size, ok1 := pyInts(args[2])
	stride, ok2 := pyInts(args[3])
	if !ok1 || !ok2 || len(size) != len(stride) {
		return nil, errors.New("_rebuild_tensor: size and stride must be tuples of ints of the same length")
	}
	t := &binTensor{storage: st, offset: off, shape: make([]int, len(size)), strides: stride}
	for i, d := range size {
		if d < 0 || d > math.MaxInt || stride[i] < 0 {
			return nil, fmt.Errorf("_rebuild_tensor: bad size %v or stride %v", size, stride)
		}
		t.shape[i] = int(d)
	}
	return t, nil
}

// rebuildParameter is torch._utils._rebuild_parameter(data, requires_grad, backward_hooks) (and
// _rebuild_parameter_with_state): an nn.Parameter is just its tensor here.
type rebuildParameter struct{}

func (rebuildParameter) Call(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, errors.New("_rebuild_parameter: no arguments")
	}
	return args[0], nil
}

// rebuildFromType is torch._tensor._rebuild_from_type_v2(func, new_type, args, state): it calls
// func(*args) and ignores the subclass and state.
type rebuildFromType struct{}

func (rebuildFromType) Call(args ...any) (any, error) {
	if len(args) < 3 {
		return nil, errors.New("_rebuild_from_type_v2: too few arguments")
	}
	fn, ok := args[0].(types.Callable)
	targs, ok2 := args[2].(*types.Tuple)
	if !ok || !ok2 {
		return nil, errors.New("_rebuild_from_type_v2: bad arguments")
	}
	return fn.Call(*targs...)
}

// torchFindClass resolves the globals a state-dict pickle refers to. Unknown globals become inert
// pyGlobal values (nothing is ever executed): calling or instantiating one is refused, naming it.
func torchFindClass(module, name string) (any, error) {
	switch module + "." + name {
	case "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor":
		return rebuildTensor{}, nil
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		return rebuildParameter{}, nil
	case "torch._tensor._rebuild_from_type_v2":
		return rebuildFromType{}, nil
	}
	if module == "torch" || module == "torch.storage" {
		if dt, ok := storageTypes[name]; ok {
			return &storageClass{name: module + "." + name, dtype: dt}, nil
		}
	}
	return &pyGlobal{module: module, name: name}, nil
}

// show writes a pickled int or str as Python would, and anything else by
// describe.
func show(v any) string {
	if n, ok := pyInt(v); ok {
		return fmt.Sprint(n)
	}
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return describe(v)
}

// pyInt returns a pickled integer as int64.
func pyInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// pyInts returns a pickled tuple (or list) of integers.
func pyInts(v any) ([]int64, bool) {
	var items []any
	switch x := v.(type) {
	case *types.Tuple:
		items = *x
	case *types.List:
		items = *x
	default:
		return nil, false
	}
	out := make([]int64, len(items))
	for i, it := range items {
		n, ok := pyInt(it)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// storageID is a decoded persistent id ('storage', storage_type, key, location, numel[, view]).
type storageID struct {
	dtype DType
	key   string
	numel int64
	view  any // legacy format only: view metadata (None in every file torch>=1.0 writes)
}

func parseStorageID(pid any) (storageID, error) {
	var id storageID
	t, ok := pid.(*types.Tuple)
	if !ok || len(*t) < 5 {
		return id, errors.New("persistent id is not a ('storage', type, key, location, numel) tuple")
	}
	if s, _ := t.Get(0).(string); s != "storage" {
		return id, fmt.Errorf("persistent id of kind %q, want 'storage'", t.Get(0))
	}
	sc, ok := t.Get(1).(*storageClass)
	if !ok {
		if g, isG := t.Get(1).(*pyGlobal); isG {
			return id, fmt.Errorf("unsupported storage type %s", g)
		}
		return id, errors.New("persistent id: storage type is not a torch storage class")
	}
	id.dtype = sc.dtype
	if id.key, ok = t.Get(2).(string); !ok {
		return id, errors.New("persistent id: storage key is not a string")
	}
	if id.numel, ok = pyInt(t.Get(4)); !ok || id.numel < 0 || id.numel > math.MaxInt64/8 {
		return id, errors.New("persistent id: bad storage size")
	}
	if len(*t) > 5 {
		id.view = t.Get(5)
	}
	return id, nil
}

// stateDictEntries turns the unpickled top-level object — a dict or OrderedDict of name to tensor
// — into entries: resolve locates each storage's bytes, then each view is checked against its
// storage.
func stateDictEntries(path string, obj any, resolve func(*binStorage) error) ([]*entry, error) {
	type kv struct {
		k, v any
	}
	var items []kv
	switch d := obj.(type) {
	case *types.OrderedDict:
		for el := d.List.Front(); el != nil; el = el.Next() {
			e := el.Value.(*types.OrderedDictEntry)
			items = append(items, kv{e.Key, e.Value})
		}
	case *types.Dict:
		for _, e := range *d {
			items = append(items, kv{e.Key, e.Value})
		}
	default:
		return nil, fileErr(path, "top-level object is %s, want a state dict (dict of name to tensor)", describe(obj))
	}
	seen := map[string]bool{}
	var es []*entry
	for _, it := range items {
		name, ok := it.k.(string)
		if !ok {
			return nil, fileErr(path, "state dict key is %s, want a string", describe(it.k))
		}
		if seen[name] {
			return nil, tensorErr(path, name, "duplicate name in state dict")
		}
		seen[name] = true
		t, ok := it.v.(*binTensor)
		if !ok {
			return nil, tensorErr(path, name, "value is %s, not a tensor (nested or non-tensor "+
				"state dicts are not supported)", describe(it.v))
		}
		if err := resolve(t.storage); err != nil {
			return nil, &Error{File: path, Tensor: name, Err: err}
		}
		e, err := t.entry(path, name)
		if err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	return es, nil
}

// entry checks that the view lies inside its storage and builds the tensor's entry.
func (t *binTensor) entry(path, name string) (*entry, error) {
	numel, err := checkShape(t.shape)
	if err != nil {
		return nil, &Error{File: path, Tensor: name, Err: err}
	}
	if t.offset > math.MaxInt64/8 {
		return nil, tensorErr(path, name, "storage offset %d out of range", t.offset)
	}
	st := t.storage
	e := &entry{
		info:    Info{Name: name, DType: st.dtype, Shape: t.shape, File: path},
		numel:   numel,
		src:     st.src,
		elemOff: t.offset,
	}
	if numel == 0 {
		return e, nil
	}
	// Index of the last element the view touches; every term is bounded, so no overflow.
	last := t.offset
	contiguous := true
	want := int64(1)
	for i := len(t.shape) - 1; i >= 0; i-- {
		d := int64(t.shape[i])
		if t.strides[i] > math.MaxInt64/8/max(d, 1) {
			return nil, tensorErr(path, name, "stride %v out of range", t.strides)
		}
		last += (d - 1) * t.strides[i]
		if last > math.MaxInt64/8 {
			return nil, tensorErr(path, name, "view out of range")
		}
		if d != 1 && t.strides[i] != want {
			contiguous = false
		}
		want *= d
	}
	if last >= st.numel {
		return nil, tensorErr(path, name, "view (offset %d, size %v, stride %v) reaches element %d "+
			"but storage %q has %d elements", t.offset, t.shape, t.strides, last, st.key, st.numel)
	}
	if !contiguous {
		e.strides = t.strides
	}
	return e, nil
}
