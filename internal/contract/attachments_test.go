package contract

import (
	"path/filepath"
	"regexp"
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

// attachedLineInUI is the web UI's pattern for an attached line
// (web/src/attach.tsx): a line it does not match shows as text, not as a
// chip.
var attachedLineInUI = regexp.MustCompile(`^Attached: (attachments/[^\n]+) \((\d+(?:\.\d)? (?:B|KiB|MiB))\)$`)

func TestWithAttachments(t *testing.T) {
	log := Attachment{Path: "attachments/build.log", Size: 16}
	shot := Attachment{Path: "attachments/shot (2).png", Size: 1536, MediaType: "image/png"}
	big := Attachment{Path: "attachments/dump.bin", Size: 10<<20 - 1}
	tests := []struct {
		text     string
		attached []Attachment
		want     string
	}{
		{"hi", nil, "hi"},
		{"What went wrong?", []Attachment{log}, "What went wrong?\n\nAttached: attachments/build.log (16 B)"},
		{"look  \n", []Attachment{log, shot, big}, "look\n\nAttached: attachments/build.log (16 B)\nAttached: attachments/shot (2).png (2 KiB)\nAttached: attachments/dump.bin (10.0 MiB)"},
		{"  ", []Attachment{log}, "Attached: attachments/build.log (16 B)"},
	}
	for _, tt := range tests {
		got := WithAttachments(tt.text, tt.attached)
		if got != tt.want {
			t.Errorf("WithAttachments(%q, %d files) = %q, want %q", tt.text, len(tt.attached), got, tt.want)
		}
		for _, a := range tt.attached {
			if m := attachedLineInUI.FindStringSubmatch(AttachedLine(a)); m == nil || m[1] != a.Path {
				t.Errorf("the web UI would not show %q as a chip", AttachedLine(a))
			}
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1535: "1 KiB", 1536: "2 KiB", 1<<20 - 1: "1024 KiB", 1 << 20: "1.0 MiB", 3<<19 + 1: "1.5 MiB"} {
		if got := AttachmentSize(n); got != want {
			t.Errorf("AttachmentSize(%d) = %q, want %q", n, got, want)
		}
	}
	if got := AttachedPaths([]Attachment{log, shot}); len(got) != 2 || got[0] != log.Path || got[1] != shot.Path {
		t.Errorf("AttachedPaths = %q", got)
	}
}

func TestMendAttachmentName(t *testing.T) {
	for in, want := range map[string]string{
		"build.log":                    "build.log",
		".env":                         "env",
		" . .bashrc ":                  "bashrc",
		"a/b\\c":                       "a_b_c",
		"evil\u202etxt.exe":            "evil_txt.exe",
		"bell\a\x00":                   "bell__",
		"\xff\xfe.png":                 "__.png",
		"...":                          "attachment",
		"":                             "attachment",
		strings.Repeat("é", 150):       strings.Repeat("é", 100),
		strings.Repeat("a", 199) + "é": strings.Repeat("a", 199),
	} {
		if got := MendAttachmentName(in); got != want {
			t.Errorf("MendAttachmentName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzMendAttachmentName: whatever a local file is called, the mended
// name is one the worker stores, and a valid name is kept as it is.
func FuzzMendAttachmentName(f *testing.F) {
	for _, s := range []string{"log.txt", ".x", "a/../b", "\u202e", "\xff", strings.Repeat("ü", 120), " . ", "Makefile"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := MendAttachmentName(name)
		if err := ValidateAttachmentName(got); err != nil {
			t.Fatalf("MendAttachmentName(%q) = %q, which is refused: %v", name, got, err)
		}
		if ValidateAttachmentName(name) == nil && got != name {
			t.Fatalf("MendAttachmentName(%q) = %q, changing a valid name", name, got)
		}
	})
}
