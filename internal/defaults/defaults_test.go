package defaults

import (
	"log/slog"
	"testing"
	"time"
)

func TestCopy(t *testing.T) {
	type opts struct{ N int }
	if got := Copy[opts](nil); got != (opts{}) {
		t.Errorf("Copy(nil) = %+v, want the zero value", got)
	}
	in := &opts{N: 3}
	got := Copy(in)
	got.N = 4
	if in.N != 3 {
		t.Errorf("Copy let a change reach the caller's struct: %+v", in)
	}
}

func TestIfZero(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"unset": {"", "d"},
		"set":   {"x", "x"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tc.in
			IfZero(&got, "d")
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIfNotPositive(t *testing.T) {
	tests := map[string]struct{ in, want time.Duration }{
		"zero":     {0, time.Second},
		"negative": {-1, time.Second},
		"set":      {time.Minute, time.Minute},
		"smallest": {1, 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tc.in
			IfNotPositive(&got, time.Second)
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLoggerAndClock(t *testing.T) {
	var l *slog.Logger
	Logger(&l)
	if l == nil || l.Enabled(t.Context(), slog.LevelError) {
		t.Errorf("Logger(nil) = %v, want a logger that discards everything", l)
	}
	mine := slog.New(slog.NewTextHandler(nil, nil))
	l = mine
	Logger(&l)
	if l != mine {
		t.Error("Logger replaced a logger the caller set")
	}

	var now func() time.Time
	Clock(&now)
	if now == nil || now().IsZero() {
		t.Error("Clock(nil) did not set the wall clock")
	}
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now = func() time.Time { return fixed }
	Clock(&now)
	if !now().Equal(fixed) {
		t.Error("Clock replaced a clock the caller set")
	}
}
