//go:build race

package main

// raceEnabled is true when the tests are built with -race; the binary the
// kill -9 test runs is then built with it too.
const raceEnabled = true
