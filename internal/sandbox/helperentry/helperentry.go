// Package helperentry runs the sandbox's helper while the binary is still
// initialising its packages: a binary re-executed as the helper then
// skips the initialisation of everything else it links (SQL engines,
// SDKs, metrics), which would cost every sandboxed command milliseconds.
// Import it, for its side effect, from package main only.
package helperentry

import "github.com/talkide/platform/internal/sandbox"

func init() { sandbox.RunHelper() }
