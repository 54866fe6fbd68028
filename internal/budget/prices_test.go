package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultPrices(t *testing.T) {
	p := DefaultPrices()
	if p.AsOf == "" || len(p.Models()) < 20 {
		t.Fatalf("built-in prices: as of %q, %d models", p.AsOf, len(p.Models()))
	}
	tests := map[string]struct {
		model string
		want  Price
		known bool
	}{
		"sonnet 4.6": {"claude-sonnet-4-6", Price{Rates: Rates{3000, 15000, 3750, 6000, 300}, WebSearch: 10 * Microdollar * 1000}, true},
		"dated id":   {"claude-haiku-4-5-20251001", Price{Rates: Rates{1000, 5000, 1250, 2000, 100}, WebSearch: 10_000_000}, true},
		"opus 5.5":   {"claude-opus-5-5", Price{Rates: Rates{4000, 20000, 5000, 8000, 200}, WebSearch: 10_000_000}, true},
		"haiku 5.5": {"claude-haiku-5-5", Price{Rates: Rates{100, 500, 125, 200, 10},
			LongPrompt: &LongPrompt{Above: 100_000, Rates: Rates{500, 2500, 625, 1000, 50}}, WebSearch: 10_000_000}, true},
		"unknown": {"claude-fable-5-2", Price{Rates: Rates{10000, 50000, 12500, 20000, 1000}, WebSearch: 10_000_000}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, known := p.Lookup(tc.model)
			if known != tc.known {
				t.Errorf("known = %v, want %v", known, tc.known)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("price (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCost(t *testing.T) {
	p := DefaultPrices()
	sonnet, _ := p.Lookup("claude-sonnet-4-6")
	haiku, _ := p.Lookup("claude-haiku-5-5")
	tests := map[string]struct {
		p    Price
		u    Usage
		want Money
	}{
		"every kind": {sonnet, Usage{InputTokens: 1200, CacheWrite5mTokens: 10000, CacheWrite1hTokens: 20000, OutputTokens: 850,
			CacheReadTokens: 1000, WebSearchRequests: 2, WebFetchRequests: 3}, 173_850_000 + 300_000 + 20_000_000},
		"nothing": {sonnet, Usage{}, 0},
		// 100,000 prompt tokens is not over the threshold; 100,001 is.
		"at the threshold":   {haiku, Usage{InputTokens: 100_000, OutputTokens: 10}, 100_000*100 + 10*500},
		"over the threshold": {haiku, Usage{InputTokens: 99_000, CacheReadTokens: 1_001, OutputTokens: 10}, 99_000*500 + 1_001*50 + 10*2500},
	}
	for name, tc := range tests {
		if got := tc.p.Cost(tc.u); got != tc.want {
			t.Errorf("%s: cost %v, want %v", name, got, tc.want)
		}
	}
}

func TestOverride(t *testing.T) {
	p, err := DefaultPrices().Override([]byte(`{
		"as_of": "2027-01-01",
		"fallback": "ours",
		"web_search_per_1000": 12,
		"models": {
			"ours": {"input": 1, "output": "2", "cache_write_5m": "1.25", "cache_write_1h": "2", "cache_read": "0.1", "web_search_per_1000": "0"},
			"claude-sonnet-4-6": {"input": "2.5", "output": "12", "cache_write_5m": "3", "cache_write_1h": "5", "cache_read": "0.25"}
		}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.AsOf != "2027-01-01" || p.Fallback() != "ours" {
		t.Errorf("as of %q, fallback %q", p.AsOf, p.Fallback())
	}
	s, _ := p.Lookup("claude-sonnet-4-6")
	if want := (Price{Rates: Rates{2500, 12000, 3000, 5000, 250}, WebSearch: 12_000_000}); !cmp.Equal(s, want) {
		t.Errorf("overridden sonnet = %+v, want %+v", s, want)
	}
	if o, known := p.Lookup("new-model"); known || o.Input != 1000 || o.WebSearch != 0 {
		t.Errorf("unknown model priced %+v (known %v), want the new fallback's", o, known)
	}
	if h, _ := p.Lookup("claude-haiku-4-5"); h.Input != 1000 || h.WebSearch != 12_000_000 {
		t.Errorf("untouched haiku = %+v, want its price and the new web search price", h)
	}
	if d, _ := DefaultPrices().Lookup("claude-sonnet-4-6"); d.Input != 3000 {
		t.Error("Override changed the list it was called on")
	}
}

func TestPriceErrors(t *testing.T) {
	tests := map[string]string{
		"not json":       `{`,
		"unknown field":  `{"modles":{}}`,
		"missing rate":   `{"fallback":"m","models":{"m":{"input":"1","output":"2","cache_write_5m":"1","cache_write_1h":"2"}}}`,
		"too precise":    `{"fallback":"m","models":{"m":{"input":"0.0005","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1"}}}`,
		"negative":       `{"fallback":"m","models":{"m":{"input":"-1","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1"}}}`,
		"bad fallback":   `{"fallback":"x","models":{"m":{"input":"1","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1"}}}`,
		"no fallback":    `{"models":{"m":{"input":"1","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1"}}}`,
		"bad long":       `{"fallback":"m","models":{"m":{"input":"1","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1","long_prompt":{"above_tokens":0,"input":"1","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1"}}}}`,
		"search precise": `{"fallback":"m","web_search_per_1000":"0.0000001","models":{"m":{"input":"1","output":"2","cache_write_5m":"1","cache_write_1h":"2","cache_read":"0.1"}}}`,
	}
	for name, in := range tests {
		if _, err := ParsePrices([]byte(in)); err == nil || !errors.Is(err, ErrPrices) {
			t.Errorf("%s: err = %v, want an ErrPrices", name, err)
		} else if strings.Contains(err.Error(), "%!") {
			t.Errorf("%s: malformed message %q", name, err)
		}
	}
}
