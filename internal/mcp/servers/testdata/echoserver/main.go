// Command echoserver is a tiny MCP server over stdio for tests: its tools
// echo text, report the server's process id and environment, sleep, fail,
// return large or non-text content, and crash the server on request.
//
// Flags: -exit-now exits with status 3 before serving (a server that fails
// at once); -child starts a long sleep in the server's process group (to
// check that closing kills the whole group); -hang never answers; -swap
// A:B keeps exchanging two names of its working directory while it serves
// (a process racing the worker's file tools) and adds a tool "swaps" that
// counts the exchanges.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type none struct{}

type sleepIn struct {
	MS int `json:"ms" jsonschema:"how long to sleep, in milliseconds"`
}

func main() {
	exitNow := flag.Bool("exit-now", false, "exit with status 3 before serving")
	child := flag.Bool("child", false, "start a long sleep in the process group")
	hang := flag.Bool("hang", false, "never answer")
	swap := flag.String("swap", "", "A:B, two names to keep exchanging with renameat2(RENAME_EXCHANGE)")
	flag.Parse()
	if *exitNow {
		fmt.Fprintln(os.Stderr, "echoserver: told to exit at once")
		os.Exit(3)
	}
	if *hang {
		select {}
	}
	var childPID int
	if *child {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			log.Fatal(err)
		}
		childPID = c.Process.Pid
	}

	s := mcp.NewServer(&mcp.Implementation{Name: "echoserver", Version: "1"}, nil)
	if a, b, ok := strings.Cut(*swap, ":"); ok {
		var swaps atomic.Int64
		go func() {
			for {
				if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
					log.Fatalf("renameat2: %v", err)
				}
				swaps.Add(1)
			}
		}()
		mcp.AddTool(s, &mcp.Tool{Name: "swaps", Description: "Counts the exchanges made so far."},
			func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(swaps.Load())}}}, none{}, nil
			})
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes its text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, none, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, none{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
			return nil, none{}, fmt.Errorf("it failed, as asked")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "Returns the server's process id and its child's."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d %d", os.Getpid(), childPID)}}}, none{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Returns the environment and working directory."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
			env := os.Environ()
			sort.Strings(env)
			wd, _ := os.Getwd()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "cwd=" + wd + "\n" + strings.Join(env, "\n")}}}, none{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Returns a large text and an image."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: strings.Repeat("x", 100000)},
				&mcp.ImageContent{MIMEType: "image/png", Data: []byte("not really a png")},
			}}, none{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps, or until the call is cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, none, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, none{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
			os.Exit(1)
			return nil, none{}, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
