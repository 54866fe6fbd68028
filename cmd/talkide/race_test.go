//go:build race

package main

// raceEnabled is true when the tests are built with -race; the binary the
// tests run as a process (talkideBinary) is then built with it too.
const raceEnabled = true
