package egress

import (
	"bytes"
	"context"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curl, a client the sandbox's processes really use, through the proxy.
func TestCurl(t *testing.T) {
	secure, plain := greeters(t, "hello curl over")
	h := start(t, nil, loopbackAllowList(secure.Listener.Addr().(*net.TCPAddr).Port, plain.Listener.Addr().(*net.TCPAddr).Port))
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := h.srv.URLFor("conv-curl")
	noCredential := "http://" + h.srv.Addr().String()
	wrongCredential := strings.Replace(proxy, "conv-curl:", "conv-other:", 1)

	tests := map[string]struct {
		proxy, url string
		wantOut    string // stdout, when curl must succeed
		wantErr    string // in stderr, when it must fail
	}{
		"https through a tunnel":    {proxy: proxy, url: secure.URL + "/x", wantOut: "hello curl over https"},
		"http forwarded":            {proxy: proxy, url: plain.URL + "/x", wantOut: "hello curl over http"},
		"https without credential":  {proxy: noCredential, url: secure.URL + "/x", wantErr: "407"},
		"https, another's id":       {proxy: wrongCredential, url: secure.URL + "/x", wantErr: "407"},
		"https to an unlisted host": {proxy: proxy, url: "https://registry.example/", wantErr: "403"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			curl, err := exec.LookPath("curl")
			if err != nil {
				t.Skip("curl is not installed")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, curl, "--silent", "--show-error", "--max-time", "20",
				"--cacert", ca, "--proxy", tc.proxy, tc.url)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()} // no proxy variables of the machine's
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			if tc.wantOut != "" {
				if err != nil || stdout.String() != tc.wantOut {
					t.Errorf("curl: %v, stdout %q, stderr %q; want %q", err, stdout.String(), stderr.String(), tc.wantOut)
				}
				return
			}
			if err == nil || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("curl: %v, stderr %q; want a failure saying %s", err, stderr.String(), tc.wantErr)
			}
		})
	}
}
