// Package contract holds the wire types of the seam between the control-plane
// and the worker (commands, events, reports), version 1, and nothing else.
//
// Both sides import it; it imports neither. docs/contract.md shows an example
// of every command, event and report.
package contract
