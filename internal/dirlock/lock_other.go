//go:build !unix

package dirlock

import "os"

// tryLock always succeeds where flock(2) is missing: runs are then not
// kept apart.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}
