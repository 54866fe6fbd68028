package worker

import (
	"bytes"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/roundtrip"
)

// attach posts data as an attachment called name (raw, unescaped when
// raw is set) to the fixture's conversation.
func (f *viewFixture) attach(t *testing.T, name string, data []byte) (*http.Response, []byte) {
	t.Helper()
	u := strings.Replace(contract.AttachmentsPath, "{id}", f.conv, 1) + "?name=" + url.QueryEscape(name)
	resp, body := f.tw.call(t, http.MethodPost, u, data)
	if strings.Contains(string(body), secret) {
		t.Fatalf("POST %s answered the secret: %s", u, body)
	}
	return resp, body
}

func pngBytes(t testing.TB, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAttachStores(t *testing.T) {
	f := newViewFixture(t)
	img := pngBytes(t, 3, 2)
	tests := []struct {
		name      string
		data      []byte
		wantPath  string
		wantMedia string
	}{
		{"log.txt", []byte("line one\n"), "attachments/log.txt", ""},
		{"log.txt", []byte("line two\n"), "attachments/log (2).txt", ""},
		{"log.txt", []byte("line three\n"), "attachments/log (3).txt", ""},
		{"shot.png", img, "attachments/shot.png", "image/png"},
		{"fake.png", []byte("\x89PNG\r\n\x1a\nnot really a png"), "attachments/fake.png", ""},
		{"Makefile", []byte("all:\n"), "attachments/Makefile", ""},
		{"Makefile", []byte("all:\n"), "attachments/Makefile (2)", ""},
		{"résumé 2026.pdf", []byte("%PDF-1.4"), "attachments/résumé 2026.pdf", ""},
	}
	for _, tc := range tests {
		resp, body := f.attach(t, tc.name, tc.data)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, body)
		}
		got := decode[contract.Attachment](t, body)
		want := contract.Attachment{Path: tc.wantPath, Size: int64(len(tc.data)), MediaType: tc.wantMedia}
		if got != want {
			t.Errorf("%s: answered %+v, want %+v", tc.name, got, want)
		}
		data, err := os.ReadFile(filepath.Join(f.ws, tc.wantPath))
		if err != nil || !bytes.Equal(data, tc.data) {
			t.Errorf("%s: the workspace holds %q, %v", tc.wantPath, data, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(f.ws, contract.AttachmentsDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(tests) {
		t.Errorf("attachments/ holds %d entries, want %d (no temporary file left)", len(entries), len(tests))
	}
}

func TestAttachRefuses(t *testing.T) {
	f := newViewFixture(t)
	tests := map[string]struct {
		query  string
		data   []byte
		status int
		code   string
	}{
		"no name":         {"", []byte("x"), 400, contract.CodeBadRequest},
		"empty name":      {"name=", []byte("x"), 400, contract.CodeBadRequest},
		"dot":             {"name=.", []byte("x"), 400, contract.CodeBadRequest},
		"dot dot":         {"name=..", []byte("x"), 400, contract.CodeBadRequest},
		"traversal":       {"name=" + url.QueryEscape("../../secret.txt"), []byte("x"), 400, contract.CodeBadRequest},
		"slash":           {"name=" + url.QueryEscape("a/b"), []byte("x"), 400, contract.CodeBadRequest},
		"backslash":       {"name=" + url.QueryEscape(`a\b`), []byte("x"), 400, contract.CodeBadRequest},
		"NUL":             {"name=a%00b", []byte("x"), 400, contract.CodeBadRequest},
		"newline":         {"name=a%0Ab", []byte("x"), 400, contract.CodeBadRequest},
		"hidden":          {"name=.bashrc", []byte("x"), 400, contract.CodeBadRequest},
		"not UTF-8":       {"name=%FF", []byte("x"), 400, contract.CodeBadRequest},
		"too long":        {"name=" + strings.Repeat("a", contract.MaxAttachmentName+1), []byte("x"), 400, contract.CodeBadRequest},
		"twice":           {"name=a&name=b", []byte("x"), 400, contract.CodeBadRequest},
		"unknown param":   {"name=a&path=b", []byte("x"), 400, contract.CodeBadRequest},
		"empty body":      {"name=a.txt", nil, 400, contract.CodeBadRequest},
		"too large":       {"name=a.txt", make([]byte, contract.MaxAttachmentBytes+1), 413, contract.CodeTooLarge},
		"no conversation": {"name=a.txt", []byte("x"), 404, contract.CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			conv := f.conv
			if name == "no conversation" {
				conv = "nope"
			}
			u := strings.Replace(contract.AttachmentsPath, "{id}", conv, 1)
			if tc.query != "" {
				u += "?" + tc.query
			}
			resp, body := f.tw.call(t, http.MethodPost, u, tc.data)
			if resp.StatusCode != tc.status || decode[contract.Error](t, body).Error.Code != tc.code {
				t.Fatalf("%d %s; want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(f.ws, contract.AttachmentsDir)); err == nil {
		entries, _ := os.ReadDir(filepath.Join(f.ws, contract.AttachmentsDir))
		if len(entries) > 0 {
			t.Errorf("refused uploads left %d files", len(entries))
		}
	}
	if data, _ := os.ReadFile(f.outside); string(data) != secret {
		t.Errorf("the file outside the workspace changed: %q", data)
	}
}

// TestAttachSymlinks: a symlink where attachments/ is, or where the file
// would land, is never written through.
func TestAttachSymlinks(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		for name, target := range map[string]string{"outside": "../c2", "inside": "src"} {
			t.Run(name, func(t *testing.T) {
				f := newViewFixture(t)
				if err := os.Symlink(target, filepath.Join(f.ws, contract.AttachmentsDir)); err != nil {
					t.Fatal(err)
				}
				resp, body := f.attach(t, "theirs.txt", []byte("overwritten"))
				if resp.StatusCode != http.StatusUnprocessableEntity || decode[contract.Error](t, body).Error.Code != contract.CodeNotAFile {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				if data, _ := os.ReadFile(filepath.Join(f.tw.dir, "workspaces", "c2", "theirs.txt")); string(data) != secret {
					t.Errorf("the other workspace's file changed: %q", data)
				}
			})
		}
	})
	t.Run("file", func(t *testing.T) {
		f := newViewFixture(t)
		dir := filepath.Join(f.ws, contract.AttachmentsDir)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"log.txt", "log (2).txt"} {
			if err := os.Symlink(f.outside, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("nowhere", filepath.Join(dir, "log (3).txt")); err != nil {
			t.Fatal(err)
		}
		resp, body := f.attach(t, "log.txt", []byte("new"))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if got := decode[contract.Attachment](t, body).Path; got != "attachments/log (4).txt" {
			t.Errorf("stored at %q, want the first name no symlink holds", got)
		}
		if data, _ := os.ReadFile(f.outside); string(data) != secret {
			t.Errorf("written through a symlink: the outside file holds %q", data)
		}
		if _, err := os.Stat(filepath.Join(dir, "nowhere")); err == nil {
			t.Error("written through a dangling symlink")
		}
	})
}

// TestSendAttachments: the paths a message names as attached reach the
// harness; a path outside attachments/ is refused before a turn starts.
func TestSendAttachments(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "c1")
	u := strings.Replace(contract.MessagesPath, "{id}", "c1", 1)
	resp, body := tw.call(t, http.MethodPost, u, contract.SendMessageRequest{ClientMessageID: "m_bad", Text: "hi", Attachments: []string{"attachments/../../x"}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad attachment path: %d %s", resp.StatusCode, body)
	}
	want := []string{"attachments/log.txt", "attachments/shot.png"}
	resp, body = tw.call(t, http.MethodPost, u, contract.SendMessageRequest{ClientMessageID: "m_1", Text: "see", Attachments: want})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	ft := tw.h.next(t)
	if got := ft.Turn.Attachments; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("the harness got %q, want %q", got, want)
	}
	ft.finish("end_turn")
	ft.waitEnded(t)
}

// BenchmarkAttach stores files through the signed endpoint over loopback:
// the signature over the body, the read, the fsynced write and the link.
func BenchmarkAttach(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, contract.MaxAttachmentBytes} {
		b.Run(byteSize(size), func(b *testing.B) {
			tw := newTestWorker(b, workerOpts{})
			tw.create(b, "c1")
			data := bytes.Repeat([]byte("x"), size)
			u := strings.Replace(contract.AttachmentsPath, "{id}", "c1", 1) + "?name=f"
			b.SetBytes(int64(size))
			n := 0
			for b.Loop() {
				n++ // a name of its own: no search for a free suffix
				if resp, body := tw.call(b, http.MethodPost, u+strconv.Itoa(n), data); resp.StatusCode != http.StatusCreated {
					b.Fatalf("%d %s", resp.StatusCode, body)
				}
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

// TestAttachRoom sends one file's bytes slowly, so that the worker holds
// room for all of them meanwhile: a second file beyond the room is
// refused unread, 503 too_many_uploads with Retry-After, and passes once
// the first is stored.
func TestAttachRoom(t *testing.T) {
	tw := newTestWorker(t, workerOpts{uploadMemory: 100})
	tw.create(t, "c1")
	path := strings.Replace(contract.AttachmentsPath, "{id}", "c1", 1) + "?name="

	slow := bytes.Repeat([]byte("s"), 80)
	pr, pw := io.Pipe()
	req := tw.request(t, t.Context(), http.MethodPost, path+"slow.bin", slow)
	req.Body, req.ContentLength = pr, int64(len(slow))
	first := roundtrip.Status(http.DefaultClient, req)
	if _, err := pw.Write(slow[:10]); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the slow file to take its room", func() bool {
		used, _ := tw.w.uploads.State()
		return used == int64(len(slow))
	})

	resp, body := tw.call(t, http.MethodPost, path+"second.txt", bytes.Repeat([]byte("x"), 21))
	if resp.StatusCode != http.StatusServiceUnavailable || decode[contract.Error](t, body).Error.Code != contract.CodeTooManyUploads || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("beyond the room: %d %s, Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if resp, body := tw.call(t, http.MethodPost, path+"small.txt", []byte("fits")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a file that fits: %d %s", resp.StatusCode, body)
	}

	if _, err := pw.Write(slow[10:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if status := <-first; status != http.StatusCreated {
		t.Fatalf("the slow file answered %d", status)
	}
	if used, peak := tw.w.uploads.State(); used != 0 || peak > 100 {
		t.Fatalf("room used %d (peak %d) with every file stored", used, peak)
	}
	if resp, body := tw.call(t, http.MethodPost, path+"second.txt", bytes.Repeat([]byte("x"), 21)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("once the room is back: %d %s", resp.StatusCode, body)
	}
}
