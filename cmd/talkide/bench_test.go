package main

import (
	"testing"

	"github.com/talkide/platform/internal/roles"
)

// BenchmarkTurn measures one whole turn through the real stack on loopback:
// browser API → signed command → worker → native harness → mint → gateway →
// simulator, and the events back through the control-plane's relay, until
// turn.finished reaches the client. The simulator answers at once, so this
// is the platform's own overhead per turn.
func BenchmarkTurn(b *testing.B) {
	st := startDevT(b, roles.DevConfig{})
	base := st.Info.ControlPlane
	c := createConversation(b, base)
	b.ReportAllocs()
	var last int64
	for b.Loop() {
		r := send(b, base, c.ID, "hello")
		got := readStream(b, base, c.ID, last, turnEnded(r.TurnID))
		last = got[len(got)-1].ev.Seq
	}
}
