package chatclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// Attach stores data in conversation id's workspace as a file attached by
// the user, under name mended into one the worker takes
// (contract.MendAttachmentName; a name already taken gets a suffix), and
// returns where it landed, for the next message to name
// (contract.WithAttachments). A refusal with Retry-After (too_many_uploads
// for want of room: nothing was stored) is sent again after that wait, as
// a message would be; any other failure is returned and the file not sent
// again, since a retry after a lost answer could store it twice.
func (c *Client) Attach(ctx context.Context, id, name string, data []byte) (contract.Attachment, error) {
	u, err := c.conversationURL(id, "/attachments")
	if err != nil {
		return contract.Attachment{}, err
	}
	if len(data) == 0 {
		return contract.Attachment{}, errors.New("chatclient: attach: the file is empty")
	}
	if len(data) > contract.MaxAttachmentBytes {
		return contract.Attachment{}, fmt.Errorf("chatclient: attach: the file is larger than %s", mib(contract.MaxAttachmentBytes))
	}
	u += "?name=" + url.QueryEscape(contract.MendAttachmentName(name))
	var a contract.Attachment
	err = c.retried(ctx, "attach", 1, c.log.With("conversation", id), func() error {
		_, err := c.do(ctx, http.MethodPost, u, "application/octet-stream", data, &a)
		return err
	})
	return a, err
}

// attachFile stores the local file at path for the next message, which
// as names already, and returns as with it: a file that would pass a
// message's bounds is refused before anything is sent. A path that starts
// with "~/" is in the user's home directory.
func (s *Session) attachFile(ctx context.Context, as attachments, path string) (attachments, contract.Attachment, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, rest)
		}
	}
	data, err := readAttachment(path)
	if err != nil {
		return as, contract.Attachment{}, err
	}
	if why := as.room(int64(len(data))); why != "" {
		return as, contract.Attachment{}, fmt.Errorf("chatclient: attach: %s not attached: %s", path, why)
	}
	a, err := s.Client.Attach(ctx, s.ConversationID, filepath.Base(path), data)
	if err != nil {
		return as, contract.Attachment{}, err
	}
	return append(as, a), a, nil
}

// readAttachment reads a regular file of at most MaxAttachmentBytes,
// refusing a larger one before reading it.
func readAttachment(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chatclient: attach: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("chatclient: attach: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("chatclient: attach: %s is not a regular file", path)
	}
	if fi.Size() > contract.MaxAttachmentBytes {
		return nil, fmt.Errorf("chatclient: attach: %s is %s, larger than the %s a file may be", path, contract.AttachmentSize(fi.Size()), mib(contract.MaxAttachmentBytes))
	}
	data, err := io.ReadAll(io.LimitReader(f, contract.MaxAttachmentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("chatclient: attach: %w", err)
	}
	if len(data) > contract.MaxAttachmentBytes {
		return nil, fmt.Errorf("chatclient: attach: %s grew past %s while it was read", path, mib(contract.MaxAttachmentBytes))
	}
	return data, nil
}

// attachments are the files stored for the next message: at most
// contract.MaxAttachments of them, of contract.MaxAttachmentsTotal bytes
// together, as the web UI allows a message.
type attachments []contract.Attachment

// room says why one more file of size bytes cannot go with the message,
// or "" when it can.
func (as attachments) room(size int64) string {
	total := size
	for _, a := range as {
		total += a.Size
	}
	switch {
	case len(as) >= contract.MaxAttachments:
		return fmt.Sprintf("a message takes at most %d files", contract.MaxAttachments)
	case total > contract.MaxAttachmentsTotal:
		return fmt.Sprintf("a message's files may be %s together", mib(contract.MaxAttachmentsTotal))
	}
	return ""
}

// request is the message req with the attached files named: its text
// ends with a line for each, and its Attachments list them.
func (as attachments) request(req contract.SendMessageRequest) contract.SendMessageRequest {
	if len(as) == 0 {
		return req
	}
	req.Text = contract.WithAttachments(req.Text, as)
	req.Attachments = contract.AttachedPaths(as)
	return req
}

// mib says a bound of whole mebibytes: "25 MiB".
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
