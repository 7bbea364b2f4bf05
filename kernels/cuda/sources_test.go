package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kernelSig is a kernel's parameter kinds as the source declares them.
type kernelSig struct {
	params []argKind
	decl   string
}

var globalRe = regexp.MustCompile(`extern "C" __global__ void (\w+)\(([^)]*)\)`)

// parseKernels returns the extern "C" kernels of src with their parameter
// kinds: any pointer, int, float, i64, u64.
func parseKernels(t *testing.T, src string) map[string]kernelSig {
	t.Helper()
	out := map[string]kernelSig{}
	for _, m := range globalRe.FindAllStringSubmatch(src, -1) {
		name := m[1]
		if _, dup := out[name]; dup {
			t.Errorf("kernel %s defined twice", name)
		}
		var sig kernelSig
		sig.decl = m[0]
		for _, p := range strings.Split(m[2], ",") {
			p = strings.Join(strings.Fields(p), " ")
			var k argKind
			switch {
			case strings.Contains(p, "*"):
				k = argPtr
			case strings.HasPrefix(p, "int "):
				k = argI32
			case strings.HasPrefix(p, "float "):
				k = argF32
			case strings.HasPrefix(p, "i64 "):
				k = argI64
			case strings.HasPrefix(p, "u64 "):
				k = argU64
			default:
				t.Errorf("kernel %s: parameter %q of a type the Go side does not pass", name, p)
			}
			sig.params = append(sig.params, k)
		}
		out[name] = sig
	}
	return out
}

// The Go side's kernel table and the sources name the same kernels.
func TestKernelTableMatchesSources(t *testing.T) {
	sigs := parseKernels(t, programSource())
	var names []string
	for _, n := range kernelNames {
		if n == "" {
			t.Fatal("a kernel without a name in kernelNames")
		}
		names = append(names, n)
		if _, ok := sigs[n]; !ok {
			t.Errorf("kernel %s is launched but not in cu/*.cu", n)
		}
	}
	for n := range sigs {
		if !slices.Contains(names, n) {
			t.Errorf("kernel %s of cu/*.cu is not in kernelNames", n)
		}
	}
}

// The program is one plausible header-free CUDA C text: the common file
// first, no #include (NVRTC ships no headers), balanced braces and
// parentheses outside comments and strings, every file closed, the
// constants the Go side relies on equal to its own.
func TestProgramSource(t *testing.T) {
	src := programSource()
	if !strings.HasPrefix(src, "#line 1 \"cu/00_common.cu\"\n") {
		t.Fatalf("the program starts with %.40q", src)
	}
	files, _ := filepath.Glob("cu/*.cu")
	for _, f := range files {
		if !strings.Contains(src, "#line 1 \""+filepath.ToSlash(f)+"\"\n") {
			t.Errorf("%s is not in the program", f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkBalanced(t, f, string(b))
	}
	if strings.Contains(src, "#include") {
		t.Error("the sources #include a header")
	}
	for _, c := range []struct {
		def  string
		want int
	}{{"MAX_HS", maxHS}, {"ATT_THREADS", attThreads}, {"FLASH_TQ", flashTQ}, {"FLASH_TK", flashTK}, {"FLASH_THREADS", flashThreads},
		{"DEC_TQ", decTQ}, {"DEC_TK", decTK}, {"DEC_THREADS", decThreads}} {
		re := regexp.MustCompile(`#define ` + c.def + ` (\d+)`)
		m := re.FindStringSubmatch(src)
		if m == nil || m[1] != strconv.Itoa(c.want) {
			t.Errorf("#define %s is %v, the Go side uses %d", c.def, m, c.want)
		}
	}
}

// checkBalanced fails unless (), [] and {} balance in code outside
// comments, strings and character literals.
func checkBalanced(t *testing.T, name, s string) {
	t.Helper()
	var stack []byte
	line := 1
	pairs := map[byte]byte{')': '(', ']': '[', '}': '{'}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\n':
			line++
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			line++
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				t.Errorf("%s:%d: unterminated comment", name, line)
				return
			}
			line += strings.Count(s[i:i+2+end], "\n")
			i += end + 3
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case c == ')' || c == ']' || c == '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				t.Errorf("%s:%d: unbalanced %c", name, line, c)
				return
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Errorf("%s: %d unclosed %q", name, len(stack), stack)
	}
}
