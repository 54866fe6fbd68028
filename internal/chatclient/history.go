package chatclient

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// Values of Session.Recent besides a number of turns.
const (
	// RecentAll replays every earlier event of the conversation.
	RecentAll = -1
	// DefaultRecent is how many earlier turns talkide chat shows when it
	// reopens a conversation: enough to see where it stood.
	DefaultRecent = 3
)

// ParseRecent reads a number of earlier turns to show: a count, "all"
// (RecentAll) or "none" (0).
func ParseRecent(s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "all":
		return RecentAll, nil
	case "none":
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("chatclient: %q is not a number of turns, \"all\" or \"none\"", s)
	}
	return n, nil
}

// recentTurns keeps the events of the last n turns of a replayed history,
// and what came after the last of them, so that reopening a conversation
// shows where it stood without holding the whole log in memory.
//
// A turn's group starts with the turnless events that came after the turn
// before it ended (the session's "resumed" and notices, which belong to
// what happened next) and holds every event of that turn. Turnless events
// that arrive while a turn is open belong to that turn.
type recentTurns struct {
	n      int         // at least 1
	groups []turnGroup // oldest first, at most n
	// lead holds the turnless events since the last group's turn ended;
	// they are always shown.
	lead []contract.Event
	// hidden counts the groups dropped to keep n.
	hidden int
}

type turnGroup struct {
	turn   string
	open   bool // no terminal event of turn seen yet
	events []contract.Event
}

func (r *recentTurns) add(ev contract.Event) {
	var last *turnGroup
	if len(r.groups) > 0 {
		last = &r.groups[len(r.groups)-1]
	}
	switch {
	case ev.TurnID == "" && last != nil && last.open:
		last.events = append(last.events, ev)
	case ev.TurnID == "":
		r.lead = append(r.lead, ev)
	case last != nil && ev.TurnID == last.turn:
		last.events = append(last.events, ev)
		if contract.Terminal(ev.Kind) {
			last.open = false
		}
	default:
		g := turnGroup{turn: ev.TurnID, open: !contract.Terminal(ev.Kind), events: append(r.lead, ev)}
		r.lead = nil
		if len(r.groups) >= r.n {
			r.groups[0] = turnGroup{} // let the dropped events go
			r.groups = r.groups[1:]
			r.hidden++
		}
		r.groups = append(r.groups, g)
	}
}

// take returns the kept events in order and how many turns were dropped.
func (r *recentTurns) take() ([]contract.Event, int) {
	var out []contract.Event
	for _, g := range r.groups {
		out = append(out, g.events...)
	}
	out = append(out, r.lead...)
	return out, r.hidden
}
