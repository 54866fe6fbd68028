package contract

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AttachmentsPath (control-plane → worker, signed like every command)
// stores a file the user attached in the conversation's workspace. POST
// ?name=NAME with the file's bytes as the body (application/octet-stream);
// it answers an Attachment. The name is a wish: a name already taken gets
// a suffix, so an upload never replaces a file.
const AttachmentsPath = "/v1/sessions/{id}/attachments"

// AttachmentsDir is the workspace directory attachments are stored in.
const AttachmentsDir = "attachments"

// Bounds of attachments.
const (
	// MaxAttachmentBytes bounds one attached file.
	MaxAttachmentBytes = 10 << 20
	// MaxAttachments bounds the files attached to one message.
	MaxAttachments = 10
	// MaxAttachmentsTotal bounds the bytes of a message's attachments
	// together; the web UI enforces it before it uploads anything.
	MaxAttachmentsTotal = 25 << 20
	// MaxAttachmentName bounds an attachment's name, in bytes: well under
	// the 255 of a file name, leaving room for a suffix.
	MaxAttachmentName = 200
	// MaxImageBytes bounds an image that also goes to the model as an
	// image block (the Messages API's own limit per image); a larger
	// image is stored and named in the text only.
	MaxImageBytes = 5 << 20
	// MaxImageSide bounds an image's width and height in pixels for the
	// same reason.
	MaxImageSide = 8000
)

// Attachment answers AttachmentsPath: where the file landed.
type Attachment struct {
	// Path is relative to the workspace root: "attachments/NAME".
	Path string `json:"path"`
	Size int64  `json:"size"`
	// MediaType is the image type sniffed from the bytes (image/png,
	// image/jpeg, image/gif, image/webp) of an image the model is shown;
	// empty for any other file.
	MediaType string `json:"media_type,omitempty"`
}

// ValidateAttachmentName checks the name an attachment is stored under: a
// single path component of at most MaxAttachmentName bytes of valid UTF-8,
// not "." or "..", not starting with a dot (no hidden or dot files such
// as .bashrc), with no "/", "\", NUL or other control character (bidi
// controls included: they make a name read as another), and no leading or
// trailing space.
func ValidateAttachmentName(name string) error {
	bad := func(format string, args ...any) error {
		return Invalid(ErrInvalidPath, "name", "%s "+format, append([]any{quoteShort(name)}, args...)...)
	}
	switch {
	case name == "":
		return Invalid(ErrInvalidPath, "name", "is empty; give the file's name")
	case len(name) > MaxAttachmentName:
		return bad("is longer than %d bytes", MaxAttachmentName)
	case !utf8.ValidString(name):
		return bad("is not valid UTF-8")
	case strings.ContainsAny(name, `/\`):
		return bad("contains a \"/\" or \"\\\"; give a file name, not a path")
	case strings.HasPrefix(name, "."):
		return bad("starts with a dot; attachments are not hidden files")
	case strings.TrimSpace(name) != name:
		return bad("starts or ends with a space")
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == utf8.RuneError || unicode.Is(unicode.Bidi_Control, r) {
			return bad("contains a control character")
		}
	}
	return nil
}

// AttachmentCandidate is the name tried on the n-th attempt to store name
// (n from 0): name itself, then "log (2).txt", "log (3).txt"… with the
// suffix before the extension, the base shortened when the name would
// pass MaxAttachmentName.
func AttachmentCandidate(name string, n int) string {
	if n == 0 {
		return name
	}
	ext := path.Ext(name)
	if ext == name || len(ext) > 16 {
		ext = ""
	}
	base, suffix := strings.TrimSuffix(name, ext), fmt.Sprintf(" (%d)%s", n+1, ext)
	// The base gives way, at a character's start, so that the candidate
	// is a valid name too.
	for len(base)+len(suffix) > MaxAttachmentName || !utf8.ValidString(base) {
		base = base[:len(base)-1]
	}
	return strings.TrimRight(base, " ") + suffix
}

// ValidateAttachmentPath checks a path a message names as attached:
// a workspace path directly in AttachmentsDir.
func ValidateAttachmentPath(field, p string) error {
	clean, err := ValidateWorkspacePath(field, p)
	if err != nil {
		return err
	}
	dir, name, ok := strings.Cut(clean, "/")
	if !ok || dir != AttachmentsDir || clean != p {
		return Invalid(ErrInvalidPath, field, "%s: want %s/NAME", quoteShort(p), AttachmentsDir)
	}
	return ValidateAttachmentName(name)
}

// The text of a message with attached files ends with a line for each,
// "Attached: attachments/build.log (16 B)": that is what tells the agent,
// with any harness, which files to look at and where, and what the web UI
// shows as the message's chips. The web UI and talkide chat write it
// alike.

// AttachedLine is the line of the message's text that names a.
func AttachedLine(a Attachment) string {
	return "Attached: " + a.Path + " (" + AttachmentSize(a.Size) + ")"
}

// AttachmentSize says n bytes as an attached line does: "16 B", "3 KiB",
// "1.5 MiB".
func AttachmentSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", (n+512)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// WithAttachments is the text sent with attached: text, a blank line, and
// a line for each file; text alone when nothing is attached.
func WithAttachments(text string, attached []Attachment) string {
	if len(attached) == 0 {
		return text
	}
	var b strings.Builder
	if strings.TrimSpace(text) != "" {
		b.WriteString(strings.TrimRightFunc(text, unicode.IsSpace))
		b.WriteString("\n\n")
	}
	for i, a := range attached {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(AttachedLine(a))
	}
	return b.String()
}

// AttachedPaths are the workspace paths of attached, as a message's
// Attachments names them.
func AttachedPaths(attached []Attachment) []string {
	paths := make([]string, len(attached))
	for i, a := range attached {
		paths[i] = a.Path
	}
	return paths
}

// MendAttachmentName makes name, a local file's name, one that
// ValidateAttachmentName takes, rather than refusing someone's real file:
// a "/", "\", control or bidi character (or a byte that is not UTF-8)
// becomes "_", the name is shortened by whole characters to
// MaxAttachmentName bytes, leading dots and surrounding spaces go, and
// what is left empty is "attachment". The web UI mends names alike.
func MendAttachmentName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r == '/' || r == '\\' || r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			r = '_'
		}
		if b.Len()+utf8.RuneLen(r) > MaxAttachmentName {
			break
		}
		b.WriteRune(r)
	}
	n := b.String()
	for prev := ""; prev != n; {
		prev = n
		n = strings.TrimLeft(strings.TrimSpace(n), ".")
	}
	if n == "" {
		return "attachment"
	}
	return n
}
