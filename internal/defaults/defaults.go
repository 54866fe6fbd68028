// Package defaults fills in the fields of an options struct that its caller
// left unset, so that every constructor reads "unset" the same way.
package defaults

import (
	"log/slog"
	"time"
)

// Number is what IfNotPositive accepts: counts, sizes, durations and money,
// where zero and below mean "use the default".
type Number interface {
	~int | ~int32 | ~int64 | ~uint32 | ~uint64 | ~float64
}

// Copy returns *opts, or the zero value for a nil opts: constructors take
// options by pointer and must not write to the caller's struct.
func Copy[T any](opts *T) T {
	if opts == nil {
		var zero T
		return zero
	}
	return *opts
}

// IfZero sets *p to d when *p is the zero value of its type.
func IfZero[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// IfNotPositive sets *p to d when *p is zero or negative.
func IfNotPositive[T Number](p *T, d T) {
	if *p <= 0 {
		*p = d
	}
}

// Logger sets a nil *p to a logger that discards everything: a nil
// logger in options means "don't log".
func Logger(p **slog.Logger) {
	if *p == nil {
		*p = slog.New(slog.DiscardHandler)
	}
}

// Clock sets a nil *p to time.Now: tests inject a clock, production reads
// the wall clock.
func Clock(p *func() time.Time) {
	if *p == nil {
		*p = time.Now
	}
}
