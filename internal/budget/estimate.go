package budget

import (
	"math"
	"sync"
)

// A reservation is sized from what a call will probably cost, not from the
// worst case. The input side is the request's size in bytes divided by four
// (a token is about four bytes of English or code), priced at the model's
// input rate and scaled by what this user's input has really cost relative
// to that figure (caching makes it far cheaper; images, far fewer tokens
// than their base64 bytes). The output side is this user's recent output
// size. Both are exponentially weighted moving averages plus twice their
// mean deviation, so that most calls fit their reservation; a user without
// history gets Options.DefaultOutputTokens and a factor of one. max_tokens
// only caps the output estimate.

// ewmaWeight is the weight of a new observation.
const ewmaWeight = 0.25

// Bounds of the input factor, in thousandths.
const (
	minInputFactor = 50   // caching cannot make input cheaper than 1/20
	maxInputFactor = 3000 // 1-hour cache writes cost twice the input rate
)

// history is what one user's calls have consumed: the statistics behind
// estimates. Estimates are not money, so floating point is fine here.
type history struct {
	seed sync.Once // loads the user's recent ledger once per process

	mu                sync.Mutex
	n                 int     // guarded by mu; observations so far
	out, outDev       float64 // guarded by mu; output tokens per call
	factor, factorDev float64 // guarded by mu; input cost / (bytes/4 × input rate)
	nFactor           int     // guarded by mu
	search            float64 // guarded by mu; web searches per call
}

func ewma(mean, dev *float64, n int, x float64) {
	if n == 0 {
		*mean, *dev = x, 0
		return
	}
	d := x - *mean
	*mean += ewmaWeight * d
	*dev += ewmaWeight * (math.Abs(d) - *dev)
}

// observe adds a completed call: its usage, the price it was billed at and
// the request's size.
func (h *history) observe(u Usage, p Price, requestBytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ewma(&h.out, &h.outDev, h.n, float64(u.OutputTokens))
	if h.n == 0 {
		h.search = float64(u.WebSearchRequests)
	} else {
		h.search += ewmaWeight * (float64(u.WebSearchRequests) - h.search)
	}
	h.n++
	r := p.Rates
	if p.LongPrompt != nil && u.Prompt() > p.LongPrompt.Above {
		r = p.LongPrompt.Rates
	}
	basis := float64(inputTokens(requestBytes)) * float64(r.Input)
	if basis <= 0 {
		return
	}
	in := float64(Money(u.InputTokens)*r.Input + Money(u.CacheWrite5mTokens)*r.CacheWrite5m +
		Money(u.CacheWrite1hTokens)*r.CacheWrite1h + Money(u.CacheReadTokens)*r.CacheRead)
	ewma(&h.factor, &h.factorDev, h.nFactor, in/basis)
	h.nFactor++
}

// estimate is a reservation's size.
type estimate struct {
	InputTokens, OutputTokens, WebSearches int64
	FactorPermille                         int64
	Cost                                   Money
}

// Tokens is what the reservation holds against a tokens-per-day limit.
func (e estimate) Tokens() int64 { return e.InputTokens + e.OutputTokens }

// inputTokens estimates the input tokens of a request body of n bytes.
func inputTokens(n int64) int64 { return (n + 3) / 4 }

// estimate sizes a reservation for c at price p.
func (h *history) estimate(c Call, p Price, defaultOutput int64) estimate {
	e := estimate{InputTokens: inputTokens(c.RequestBytes), OutputTokens: defaultOutput, FactorPermille: 1000}
	h.mu.Lock()
	if h.n > 0 {
		e.OutputTokens = int64(math.Ceil(h.out + 2*h.outDev))
		e.WebSearches = int64(math.Ceil(h.search))
	}
	if h.nFactor > 0 {
		e.FactorPermille = min(max(int64(math.Ceil((h.factor+2*h.factorDev)*1000)), minInputFactor), maxInputFactor)
	}
	h.mu.Unlock()
	if c.MaxTokens > 0 && e.OutputTokens > c.MaxTokens {
		e.OutputTokens = c.MaxTokens
	}
	r := p.Rates
	if p.LongPrompt != nil && e.InputTokens > p.LongPrompt.Above {
		r = p.LongPrompt.Rates
	}
	input := Money(e.InputTokens) * r.Input * Money(e.FactorPermille)
	e.Cost = (input+999)/1000 + Money(e.OutputTokens)*r.Output + Money(e.WebSearches)*p.WebSearch
	return e
}
