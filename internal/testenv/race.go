//go:build race

package testenv

// RaceDetector says whether this binary was built with -race. Its shadow
// memory is resident beside a process's own: a test that bounds a helper's
// memory from above, where the helper is this test binary run again, has no
// bound to hold under it.
const RaceDetector = true
