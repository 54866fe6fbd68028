package main

import "testing"

// TestBrowserFind (web/test/find.mjs): a new conversation's title, given
// after its first message, shows in the list without a reload; the list
// is ordered by last activity (a message moves a conversation to the top);
// Ctrl+K finds a word that only an assistant's reply holds, with a snippet
// marking it, and opens that conversation; the same on a phone.
func TestBrowserFind(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	res := runScenario(t, st, "find", noSteps(t))
	if title, _ := res["title"].(string); title == "" {
		t.Errorf("the scenario reported no title: %v", res)
	}
}
