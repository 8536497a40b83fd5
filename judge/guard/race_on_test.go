//go:build race

package guard

// raceDetector is set when the tests run under the race detector, which
// makes the guard's regular expressions about ten times slower.
const raceDetector = true
