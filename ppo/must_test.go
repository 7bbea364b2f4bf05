package ppo

// must returns v, panicking (failing the test) on an error: for setup
// calls (allocations) whose failure is not what a test is about.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
