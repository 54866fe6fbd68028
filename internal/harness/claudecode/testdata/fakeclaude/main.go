// Command fakeclaude stands in for the Claude Code CLI in the harness's
// tests. It speaks the CLI's stream-json protocol: one user message per
// stdin line, answered with lines replayed from the transcripts recorded
// from the real CLI (testdata/transcripts), or with a scripted behaviour.
//
// Each start writes FAKECLAUDE_DIR/start-N.json (arguments, environment,
// working directory, pid). Sessions live in
// $CLAUDE_CONFIG_DIR/fake-sessions/<id> (the number of turns so far), so
// --resume continues one and fails, as the CLI does, for an unknown id.
//
// The user's text decides the answer:
//
//	replay:NAME   the lines of FAKECLAUDE_TRANSCRIPTS/NAME.jsonl
//	crash         a started model call, then exit status 3
//	hang          a Bash tool call whose "command" (a process in a session
//	              of its own, as the CLI starts them) runs until killed;
//	              its pid goes to FAKECLAUDE_DIR/child.pid
//	anything else a text reply "fake turn N of session ID"
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

var out = bufio.NewWriter(os.Stdout)

func emit(v any) {
	b, _ := json.Marshal(v)
	out.Write(b)
	out.WriteByte('\n')
	out.Flush()
}

func main() {
	dir := os.Getenv("FAKECLAUDE_DIR")
	recordStart(dir)

	var resume string
	for i, a := range os.Args {
		if a == "--resume" && i+1 < len(os.Args) {
			resume = os.Args[i+1]
		}
	}
	sessions := filepath.Join(os.Getenv("CLAUDE_CONFIG_DIR"), "fake-sessions")
	os.MkdirAll(sessions, 0o700)
	id := resume
	turns := 0
	if resume != "" {
		b, err := os.ReadFile(filepath.Join(sessions, resume))
		if err != nil {
			emit(map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true, "num_turns": 0,
				"session_id": resume, "errors": []string{"No conversation found with session ID: " + resume}})
			fmt.Fprintln(os.Stderr, "No conversation found with session ID: "+resume)
			os.Exit(1)
		}
		turns, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	} else {
		id = fmt.Sprintf("fake-%d", os.Getpid())
	}

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		var line struct {
			Type    string `json:"type"`
			Message struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"message"`
		}
		if err := json.Unmarshal(in.Bytes(), &line); err != nil || line.Type != "user" || len(line.Message.Content) == 0 {
			fmt.Fprintf(os.Stderr, "fakeclaude: unexpected input %s\n", in.Bytes())
			os.Exit(2)
		}
		turns++
		os.WriteFile(filepath.Join(sessions, id), []byte(strconv.Itoa(turns)), 0o600)
		text := line.Message.Content[0].Text
		emit(map[string]any{"type": "system", "subtype": "init", "session_id": id, "cwd": mustWd()})
		switch {
		case strings.HasPrefix(text, "replay:"):
			replay(filepath.Join(os.Getenv("FAKECLAUDE_TRANSCRIPTS"), strings.TrimPrefix(text, "replay:")+".jsonl"), id)
		case text == "crash":
			emit(map[string]any{"type": "stream_event", "session_id": id, "parent_tool_use_id": nil,
				"event": map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_crash", "model": "fake", "usage": map[string]any{"input_tokens": 3}}}})
			os.Exit(3)
		case text == "hang":
			hang(dir, id)
		default:
			reply := fmt.Sprintf("fake turn %d of session %s", turns, id)
			emit(map[string]any{"type": "assistant", "session_id": id, "parent_tool_use_id": nil, "message": map[string]any{
				"id": fmt.Sprintf("msg_fake_%d", turns), "role": "assistant", "model": "fake",
				"content": []any{map[string]any{"type": "text", "text": reply}},
				"usage":   map[string]any{"input_tokens": 10, "output_tokens": 5}}})
			emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "stop_reason": "end_turn", "session_id": id, "result": reply})
		}
	}
}

func mustWd() string {
	wd, _ := os.Getwd()
	return wd
}

func recordStart(dir string) {
	if dir == "" {
		return
	}
	for n := 1; ; n++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("start-%d.json", n)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if os.IsExist(err) {
			continue
		}
		if err != nil {
			return
		}
		json.NewEncoder(f).Encode(map[string]any{"args": os.Args[1:], "env": os.Environ(), "cwd": mustWd(), "pid": os.Getpid()})
		f.Close()
		return
	}
}

// replay prints a recorded transcript with its session id replaced.
func replay(path, id string) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if string(m["type"]) == `"system"` && string(m["subtype"]) == `"init"` {
			continue
		}
		if _, ok := m["session_id"]; ok {
			m["session_id"], _ = json.Marshal(id)
		}
		emit(m)
	}
}

// hang starts a Bash call that never ends on its own.
func hang(dir, id string) {
	emit(map[string]any{"type": "assistant", "session_id": id, "parent_tool_use_id": nil, "message": map[string]any{
		"id": "msg_hang", "role": "assistant", "model": "fake",
		"content": []any{map[string]any{"type": "tool_use", "id": "toolu_hang", "name": "Bash", "input": map[string]any{"command": "sleep 300"}}},
		"usage":   map[string]any{"input_tokens": 10, "output_tokens": 5}}})
	emit(map[string]any{"type": "stream_event", "session_id": id, "parent_tool_use_id": nil, "event": map[string]any{"type": "message_stop"}})
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(5)
	}
	os.WriteFile(filepath.Join(dir, "child.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	cmd.Wait()
}
