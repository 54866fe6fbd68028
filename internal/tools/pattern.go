package tools

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// globPattern is a compiled glob: "/"-separated segments where "**" matches
// zero or more segments, and within a segment "*", "?", "[...]" (with
// "[!...]" or "[^...]" for negation) and "\" escapes work as in path.Match.
// Braces "{a,b}" (nestable) are expanded into alternatives first.
type globPattern struct {
	alts [][]string // segments of each alternative
}

// maxBraceAlternatives bounds brace expansion.
const maxBraceAlternatives = 1024

// compileGlob compiles pattern, a "/"-separated glob relative to some base
// directory.
func compileGlob(pattern string) (*globPattern, error) {
	if pattern == "" {
		return nil, errors.New("empty pattern")
	}
	alts, err := expandBraces(pattern)
	if err != nil {
		return nil, err
	}
	g := &globPattern{}
	for _, a := range alts {
		var segs []string
		for _, s := range strings.Split(a, "/") {
			switch {
			case s == "" || s == ".":
				continue
			case s == "**":
				if len(segs) > 0 && segs[len(segs)-1] == "**" {
					continue
				}
			case strings.Contains(s, "**"):
				// "a**b" is not a recursive wildcard, just a star.
				for strings.Contains(s, "**") {
					s = strings.ReplaceAll(s, "**", "*")
				}
			}
			if s != "**" {
				s = strings.ReplaceAll(s, "[!", "[^")
				if _, err := path.Match(s, ""); err != nil {
					return nil, fmt.Errorf("invalid glob pattern %q: %v", pattern, err)
				}
			}
			segs = append(segs, s)
		}
		g.alts = append(g.alts, segs)
	}
	return g, nil
}

// match reports whether rel, a "/"-separated relative path, matches.
func (g *globPattern) match(rel string) bool { return g.anyAlt(rel, matchSegments) }

// mayMatchUnder reports whether some path under directory rel could match,
// so a walk can skip directories that cannot.
func (g *globPattern) mayMatchUnder(rel string) bool { return g.anyAlt(rel, prefixMatches) }

// anyAlt reports whether test holds for the segments of some alternative
// and the names of rel.
func (g *globPattern) anyAlt(rel string, test func(segs, names []string) bool) bool {
	names := splitRel(rel)
	for _, segs := range g.alts {
		if test(segs, names) {
			return true
		}
	}
	return false
}

func splitRel(rel string) []string {
	if rel == "" || rel == "." {
		return nil
	}
	return strings.Split(rel, "/")
}

func matchSegments(segs, names []string) bool {
	for len(segs) > 0 {
		if segs[0] == "**" {
			rest := segs[1:]
			if len(rest) == 0 {
				return true
			}
			for i := 0; i <= len(names); i++ {
				if matchSegments(rest, names[i:]) {
					return true
				}
			}
			return false
		}
		if len(names) == 0 {
			return false
		}
		if ok, _ := path.Match(segs[0], names[0]); !ok {
			return false
		}
		segs, names = segs[1:], names[1:]
	}
	return len(names) == 0
}

// prefixMatches reports whether names could be the leading directories of
// a path matching segs.
func prefixMatches(segs, names []string) bool {
	for len(names) > 0 {
		if len(segs) == 0 {
			return false
		}
		if segs[0] == "**" {
			return true
		}
		if ok, _ := path.Match(segs[0], names[0]); !ok {
			return false
		}
		segs, names = segs[1:], names[1:]
	}
	return len(segs) > 0
}

// expandBraces expands "{a,b}" alternatives, innermost-first semantics as
// in bash: "a{b,c{d,e}}f" gives abf, acdf, acef. A brace without a matching
// close or without a top-level comma is literal.
func expandBraces(p string) ([]string, error) {
	open, closeAt, parts := findBraces(p)
	if open < 0 {
		return []string{p}, nil
	}
	prefix, suffix := p[:open], p[closeAt+1:]
	var out []string
	for _, part := range parts {
		sub, err := expandBraces(prefix + part + suffix)
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
		if len(out) > maxBraceAlternatives {
			return nil, fmt.Errorf("glob pattern %q expands to more than %d alternatives", p, maxBraceAlternatives)
		}
	}
	return out, nil
}

// findBraces finds the first "{...}" group with a top-level comma, skipping
// escaped characters and bracket expressions, and returns its bounds and
// its comma-separated parts. open is -1 when there is none.
func findBraces(p string) (open, closeAt int, parts []string) {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			if j := strings.IndexByte(p[i+1:], ']'); j >= 0 {
				i += j + 1
			}
		case '{':
			depth := 0
			start := i + 1
			var ps []string
			for j := i; j < len(p); j++ {
				switch p[j] {
				case '\\':
					j++
				case '{':
					depth++
				case '}':
					depth--
					if depth == 0 {
						if ps == nil {
							break // no comma: literal braces; look further
						}
						return i, j, append(ps, p[start:j])
					}
				case ',':
					if depth == 1 {
						ps = append(ps, p[start:j])
						start = j + 1
					}
				}
				if depth == 0 {
					break
				}
			}
		}
	}
	return -1, -1, nil
}

// hasMeta reports whether a glob segment contains pattern syntax.
func hasMeta(s string) bool {
	return strings.ContainsAny(s, `*?[{\`)
}
