package contract

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateAttachmentName(t *testing.T) {
	for name, ok := range map[string]bool{
		"log.txt": true, "résumé 2026.pdf": true, "Makefile": true, "a..b": true, strings.Repeat("x", MaxAttachmentName): true,
		"": false, ".": false, "..": false, ".env": false, "a/b": false, `a\b`: false, "a\x00b": false, "a\nb": false,
		"a\u202eb.txt": false, " a": false, "a ": false, "\xff": false, strings.Repeat("x", MaxAttachmentName+1): false,
	} {
		if err := ValidateAttachmentName(name); (err == nil) != ok {
			t.Errorf("ValidateAttachmentName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestAttachmentCandidate(t *testing.T) {
	for in, want := range map[[2]any]string{
		{"log.txt", 0}: "log.txt", {"log.txt", 1}: "log (2).txt", {"Makefile", 2}: "Makefile (3)",
		{"a.tar.gz", 1}: "a.tar (2).gz", {"x.verylongextension-of-sorts", 1}: "x.verylongextension-of-sorts (2)",
	} {
		if got := AttachmentCandidate(in[0].(string), in[1].(int)); got != want {
			t.Errorf("AttachmentCandidate(%q, %d) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

func TestValidateAttachmentPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"attachments/log.txt": true, "attachments/a/b": false, "attachments/../x": false, "attachments/": false,
		"attachments": false, "src/log.txt": false, "/attachments/log.txt": false, "attachments/.env": false, "attachments//x": false,
	} {
		if err := ValidateAttachmentPath("p", p); (err == nil) != ok {
			t.Errorf("ValidateAttachmentPath(%q) = %v, want ok %v", p, err, ok)
		}
	}
}

func FuzzAttachmentName(f *testing.F) {
	for _, s := range []string{"log.txt", "..", ".", "a/b", `a\b`, "a\x00b", ".env", " a", "résumé.pdf", "a\u202eb", "\xff", strings.Repeat("x", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateAttachmentName(name) != nil {
			return
		}
		for n := range 3 {
			c := AttachmentCandidate(name, n)
			if filepath.Base(c) != c || !filepath.IsLocal(c) || strings.HasPrefix(c, ".") || strings.ContainsAny(c, "/\\\x00") || len(c) > 255 {
				t.Fatalf("accepted %q, candidate %d %q", name, n, c)
			}
			if p := AttachmentsDir + "/" + c; ValidateAttachmentPath("p", p) != nil {
				t.Fatalf("candidate %q is not a valid attachment path", p)
			}
		}
	})
}
