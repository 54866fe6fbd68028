package budget

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Rates are the prices of one model's tokens, per token. Each is a whole
// number of nanodollars: $3 per million tokens is 3000.
type Rates struct {
	Input        Money // uncached input tokens
	Output       Money
	CacheWrite5m Money // input tokens written to the 5-minute cache
	CacheWrite1h Money // input tokens written to the 1-hour cache
	CacheRead    Money // input tokens read from the cache (hits and refreshes)
}

// Price is what one model costs.
type Price struct {
	Rates
	// LongPrompt, when set, replaces Rates for every token of a request
	// whose prompt (input, cache writes and cache reads together) is longer
	// than LongPrompt.Above tokens, as Anthropic prices some models.
	LongPrompt *LongPrompt
	// WebSearch is the price of one server-side web search.
	WebSearch Money
}

// LongPrompt is a model's price tier for long prompts.
type LongPrompt struct {
	Above int64 // tokens
	Rates
}

// Usage is what one model call consumed, as the API reports it.
type Usage struct {
	Model              string
	InputTokens        int64 // uncached input
	OutputTokens       int64
	CacheWrite5mTokens int64 // usage.cache_creation.ephemeral_5m_input_tokens
	CacheWrite1hTokens int64 // usage.cache_creation.ephemeral_1h_input_tokens
	CacheReadTokens    int64 // usage.cache_read_input_tokens
	WebSearchRequests  int64 // usage.server_tool_use.web_search_requests
	WebFetchRequests   int64 // usage.server_tool_use.web_fetch_requests (no charge of its own)
}

// Prompt is the number of prompt tokens: input, cache writes and cache reads.
func (u Usage) Prompt() int64 {
	return u.InputTokens + u.CacheWrite5mTokens + u.CacheWrite1hTokens + u.CacheReadTokens
}

// Tokens is what a tokens-per-day limit counts: every token the model read
// or wrote except cache reads. Like Anthropic's own cache-aware rate limits,
// it does not hold cheap cache hits against the user.
func (u Usage) Tokens() int64 {
	return u.InputTokens + u.CacheWrite5mTokens + u.CacheWrite1hTokens + u.OutputTokens
}

// Cost is the exact price of u.
func (p Price) Cost(u Usage) Money {
	r := p.Rates
	if p.LongPrompt != nil && u.Prompt() > p.LongPrompt.Above {
		r = p.LongPrompt.Rates
	}
	return Money(u.InputTokens)*r.Input +
		Money(u.OutputTokens)*r.Output +
		Money(u.CacheWrite5mTokens)*r.CacheWrite5m +
		Money(u.CacheWrite1hTokens)*r.CacheWrite1h +
		Money(u.CacheReadTokens)*r.CacheRead +
		Money(u.WebSearchRequests)*p.WebSearch
}

// Prices is the price list: a Price per model id, and the model whose price
// applies to a model the list does not know. It is immutable.
type Prices struct {
	AsOf      string           // the date the list was checked, e.g. 2026-11-30
	models    map[string]Price // WebSearch < 0: the list's webSearch
	webSearch Money            // per web search, for models without their own
	fallback  string
}

// Lookup returns the price of model. A dated id (claude-haiku-4-5-20251001)
// falls back to its undated one (claude-haiku-4-5). known is false when
// neither is listed; the fallback model's price is returned then, so a new
// model is never free.
func (p *Prices) Lookup(model string) (price Price, known bool) {
	pr, ok := p.models[model]
	if !ok {
		if m := datedModel.FindStringSubmatch(model); m != nil {
			pr, ok = p.models[m[1]]
		}
	}
	if !ok {
		pr = p.models[p.fallback]
	}
	if pr.WebSearch < 0 {
		pr.WebSearch = p.webSearch
	}
	return pr, ok
}

// Canonical returns the listed model id whose price applies to model: model
// itself, or for a dated id its undated one. known is false, and id empty,
// when neither is listed.
func (p *Prices) Canonical(model string) (id string, known bool) {
	if _, ok := p.models[model]; ok {
		return model, true
	}
	if m := datedModel.FindStringSubmatch(model); m != nil {
		if _, ok := p.models[m[1]]; ok {
			return m[1], true
		}
	}
	return "", false
}

// Models returns the listed model ids, sorted.
func (p *Prices) Models() []string { return slices.Sorted(maps.Keys(p.models)) }

// Fallback returns the model whose price applies to unknown models.
func (p *Prices) Fallback() string { return p.fallback }

var datedModel = regexp.MustCompile(`^(.+)-20[0-9]{6}$`)

//go:embed prices.json
var defaultPrices []byte

// DefaultPrices returns the price list built into the binary
// (internal/budget/prices.json).
func DefaultPrices() *Prices {
	p, err := ParsePrices(defaultPrices)
	if err != nil {
		panic("budget: built-in prices.json: " + err.Error())
	}
	return p
}

// ErrPrices is wrapped by every error of ParsePrices and Override.
var ErrPrices = errors.New("invalid price list")

// priceFile is the JSON form of a price list (see prices.json and
// docs/budgets.md). Amounts are decimal dollars, as strings or numbers, per
// million tokens, and per 1,000 web searches.
type priceFile struct {
	AsOf             string                `json:"as_of"`
	Fallback         string                `json:"fallback"`
	WebSearchPer1000 json.Number           `json:"web_search_per_1000"`
	Models           map[string]modelPrice `json:"models"`
	// Documentation only: where the figures come from, what is not priced.
	Sources []string          `json:"sources"`
	Notes   []string          `json:"notes"`
	Unknown map[string]string `json:"unknown"`
}

type modelPrice struct {
	rateFields
	LongPrompt *struct {
		AboveTokens int64 `json:"above_tokens"`
		rateFields
	} `json:"long_prompt"`
	WebSearchPer1000 json.Number `json:"web_search_per_1000"`
	Note             string      `json:"note"`
}

type rateFields struct {
	Input        json.Number `json:"input"`
	Output       json.Number `json:"output"`
	CacheWrite5m json.Number `json:"cache_write_5m"`
	CacheWrite1h json.Number `json:"cache_write_1h"`
	CacheRead    json.Number `json:"cache_read"`
}

// ParsePrices reads a complete price list: every model needs all five rates,
// and the fallback must be one of the models.
func ParsePrices(b []byte) (*Prices, error) {
	return (&Prices{models: map[string]Price{}}).Override(b)
}

// Override returns a copy of p with the models of the JSON price list b
// added or replaced (each model's entry as a whole), and as_of, fallback and
// web_search_per_1000 replaced when b sets them. This is how an operator's
// price file applies on top of the built-in list.
func (p *Prices) Override(b []byte) (*Prices, error) {
	var f priceFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPrices, err)
	}
	out := &Prices{AsOf: p.AsOf, models: maps.Clone(p.models), webSearch: p.webSearch, fallback: p.fallback}
	if f.AsOf != "" {
		out.AsOf = f.AsOf
	}
	if f.Fallback != "" {
		out.fallback = f.Fallback
	}
	if f.WebSearchPer1000 != "" {
		var err error
		if out.webSearch, err = perThousand(f.WebSearchPer1000); err != nil {
			return nil, fmt.Errorf("%w: web_search_per_1000: %w", ErrPrices, err)
		}
	}
	for name, mp := range f.Models {
		pr, err := mp.price()
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: %w", ErrPrices, name, err)
		}
		out.models[name] = pr
	}
	if _, ok := out.models[out.fallback]; !ok {
		return nil, fmt.Errorf("%w: fallback %q is not a listed model", ErrPrices, out.fallback)
	}
	return out, nil
}

func (mp modelPrice) price() (Price, error) {
	r, err := mp.rates()
	if err != nil {
		return Price{}, err
	}
	pr := Price{Rates: r, WebSearch: -1}
	if mp.WebSearchPer1000 != "" {
		if pr.WebSearch, err = perThousand(mp.WebSearchPer1000); err != nil {
			return Price{}, fmt.Errorf("web_search_per_1000: %w", err)
		}
	}
	if lp := mp.LongPrompt; lp != nil {
		lr, err := lp.rates()
		if err != nil {
			return Price{}, fmt.Errorf("long_prompt: %w", err)
		}
		if lp.AboveTokens <= 0 {
			return Price{}, errors.New("long_prompt: above_tokens must be positive")
		}
		pr.LongPrompt = &LongPrompt{Above: lp.AboveTokens, Rates: lr}
	}
	return pr, nil
}

func (f rateFields) rates() (Rates, error) {
	var r Rates
	for _, x := range []struct {
		name string
		v    json.Number
		dst  *Money
	}{
		{"input", f.Input, &r.Input},
		{"output", f.Output, &r.Output},
		{"cache_write_5m", f.CacheWrite5m, &r.CacheWrite5m},
		{"cache_write_1h", f.CacheWrite1h, &r.CacheWrite1h},
		{"cache_read", f.CacheRead, &r.CacheRead},
	} {
		if x.v == "" {
			return Rates{}, fmt.Errorf("%s is missing", x.name)
		}
		perM, err := ParseMoney(string(x.v))
		if err != nil || perM < 0 {
			return Rates{}, fmt.Errorf("%s: %q is not a price in dollars", x.name, x.v)
		}
		if perM%1e6 != 0 {
			return Rates{}, fmt.Errorf("%s: $%s per million tokens is not a whole number of nanodollars per token", x.name, x.v)
		}
		*x.dst = perM / 1e6
	}
	return r, nil
}

// perThousand converts a price per 1,000 requests to one per request.
func perThousand(n json.Number) (Money, error) {
	m, err := ParseMoney(string(n))
	if err != nil || m < 0 {
		return 0, fmt.Errorf("%q is not a price in dollars", n)
	}
	if m%1000 != 0 {
		return 0, fmt.Errorf("$%s per 1,000 is not a whole number of nanodollars each", n)
	}
	return m / 1000, nil
}
