//go:build race

package main

// raceEnabled is true when the tests are built with -race (raceFlags).
const raceEnabled = true
