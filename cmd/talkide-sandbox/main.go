// Command talkide-sandbox is the sandbox's helper on its own: what the
// talkide binary does when it is re-executed to start an agent command,
// in a binary that links the sandbox package and nothing else. The worker
// uses it when it is found (--sandbox-helper, or beside the talkide
// executable): a command then starts without loading and initialising
// everything else talkide links, which is most of its start-up time.
//
// It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/talkide/platform/internal/sandbox"
)

func main() {
	sandbox.RunHelper() // exits when started as the helper
	fmt.Fprintf(os.Stderr, "talkide-sandbox is the sandbox's helper, started by the talkide worker for each agent command; it is not run by hand (see talkide sandbox --help)\n")
	os.Exit(2)
}
