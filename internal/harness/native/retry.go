package native

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// DefaultMaxRetryWait is the longest Retry-After the SDK waits out before
// it retries a model call, by default.
const DefaultMaxRetryWait = 10 * time.Second

// boundRetries returns an SDK middleware that keeps the SDK from sleeping
// through a long Retry-After. The SDK honours Retry-After (and
// retry-after-ms) without any bound: a gateway that refuses a call until a
// daily limit resets says "wait seven hours", and the turn, and every
// message queued behind it, would hang that long with nothing to show.
// A response that asks for more than maxWait is marked x-should-retry:
// false, which the SDK obeys above its status rules, so it returns the
// error at once and the turn reports it; shorter waits (an upstream 429 or
// 529 asking for a few seconds) are still retried as the SDK does.
func boundRetries(maxWait time.Duration, now func() time.Time) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err != nil || res == nil || res.StatusCode < 400 {
			return res, err
		}
		if wait, ok := retryAfter(res.Header, now()); ok && wait > maxWait {
			res.Header.Set("X-Should-Retry", "false")
		}
		return res, err
	}
}

// retryAfter returns the wait a response asks for before a retry, read as
// the SDK reads it: retry-after-ms (milliseconds) when it is a number, else
// retry-after in seconds or as an HTTP date. ok is false when neither says.
func retryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return floatDuration(ms, time.Millisecond), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return floatDuration(s, time.Second), true
	}
	// The SDK reads only this form of an HTTP date (RFC 9110's preferred
	// one); for another it falls back to its own short backoff.
	if t, err := time.Parse(time.RFC1123, v); err == nil {
		return t.Sub(now), true
	}
	return 0, false
}

// floatDuration is v units as a Duration, saturating rather than
// overflowing (a header may say anything).
func floatDuration(v float64, unit time.Duration) time.Duration {
	d := v * float64(unit)
	switch {
	case math.IsNaN(d):
		return 0
	case d >= math.MaxInt64:
		return math.MaxInt64
	case d <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(d)
}
