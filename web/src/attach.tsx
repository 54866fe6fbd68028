// Attachments in the composer: files dropped, pasted or chosen become chips
// before sending; at send they are uploaded into the conversation's
// workspace (attachments/) and the message names them, one line each,
// which the user's bubble shows as chips again.
import { useRef, useState } from "preact/hooks";
import { api, ApiError } from "./api";

// The limits the server enforces too (docs/webui.md).
export const MAX_FILES = 10;
export const MAX_FILE_BYTES = 10 << 20;
export const MAX_TOTAL_BYTES = 25 << 20;

export function formatSize(n: number): string {
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return Math.round(n / 1024) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

/** A name the server accepts: no "/", "\\", control character or
 * leading dot, at most 200 bytes. Others are mended, not refused: a
 * pasted image is called "image.png" by the browser, a file "..x" is
 * someone's real file. */
export function safeName(name: string): string {
  let n = name.replace(/[\/\\\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, "_");
  // Shortened by whole characters, never half a surrogate pair.
  const chars = Array.from(n);
  while (new TextEncoder().encode(chars.join("")).length > 200) chars.pop();
  n = chars.join("");
  for (let prev = ""; prev !== n; ) {
    prev = n;
    n = n.trim().replace(/^\.+/, "");
  }
  return n || "attachment";
}

export interface Attached {
  path: string;
  size: number;
}

/** uploadAll stores files in the conversation's workspace, in order. */
export async function uploadAll(conversation: string, files: File[]): Promise<Attached[]> {
  const out: Attached[] = [];
  for (const f of files) out.push(await uploadOne(conversation, f));
  return out;
}

/** How often a file refused for want of room on the server is sent. */
const UPLOAD_TRIES = 5;

/** uploadOne stores one file. The server holds a bounded number of
 * uploaded bytes at once and refuses a file beyond them unread
 * (too_many_uploads, with Retry-After): such a file is sent again after
 * the wait it was told, a few times, before the send fails. */
async function uploadOne(conversation: string, f: File): Promise<Attached> {
  for (let tries = 1; ; tries++) {
    try {
      return await api.attach(conversation, safeName(f.name), f);
    } catch (e) {
      if (!(e instanceof ApiError) || e.code !== "too_many_uploads" || tries >= UPLOAD_TRIES) throw e;
      const wait = Math.min(Math.max(e.retryAfter, 1), 10);
      await new Promise((done) => setTimeout(done, wait * 1000));
    }
  }
}

/** withAttachments is the text sent: the user's, then a line for each
 * attached file. */
export function withAttachments(text: string, attached: Attached[]): string {
  if (!attached.length) return text;
  return (text.trim() ? text.trimEnd() + "\n\n" : "") + attached.map((a) => `Attached: ${a.path} (${formatSize(a.size)})`).join("\n");
}

const LINE = /^Attached: (attachments\/[^\n]+) \((\d+(?:\.\d)? (?:B|KiB|MiB))\)$/;

/** splitAttachments parses the trailing "Attached:" lines of a message
 * back into chips; a message without them is all text. */
export function splitAttachments(text: string): { text: string; chips: { path: string; size: string }[] } {
  const lines = text.split("\n");
  const chips: { path: string; size: string }[] = [];
  while (lines.length) {
    const m = LINE.exec(lines[lines.length - 1]);
    if (!m) break;
    chips.unshift({ path: m[1], size: m[2] });
    lines.pop();
  }
  if (!chips.length) return { text, chips };
  return { text: lines.join("\n").trimEnd(), chips };
}

/** Clip is a paperclip drawn, not an emoji: not every system has a font
 * with one. */
function Clip() {
  return (
    <svg class="clip-icon" viewBox="0 0 16 16" width="14" height="14" aria-hidden="true">
      <path d="M10.5 4.5 5.3 9.7a1.4 1.4 0 0 0 2 2l5.6-5.6a2.8 2.8 0 0 0-4-4L3.3 7.7a4.2 4.2 0 0 0 6 6l4.2-4.2"
        fill="none" stroke="currentColor" stroke-width="1.4" stroke-linecap="round" stroke-linejoin="round" />
    </svg>
  );
}

export function AttachedChips({ chips }: { chips: { path: string; size: string }[] }) {
  if (!chips.length) return null;
  return (
    <ul class="chips sent" aria-label="Attached files" data-testid="bubble-attachments">
      {chips.map((c) => (
        <li class="chip" key={c.path} data-testid="bubble-chip" title={c.path}>
          <Clip />
          <span class="chip-name">{c.path.slice("attachments/".length)}</span>
          <span class="chip-size">{c.size}</span>
        </li>
      ))}
    </ul>
  );
}

/** useAttachments holds a composer's chosen files and what refused one. */
export function useAttachments() {
  const [files, setFiles] = useState<File[]>([]);
  const [error, setError] = useState<string | null>(null);
  const add = (more: Iterable<File>) => {
    const next = [...files];
    const refused: string[] = [];
    for (const f of more) {
      const total = next.reduce((n, g) => n + g.size, 0);
      if (next.length >= MAX_FILES) refused.push(`${f.name}: at most ${MAX_FILES} files a message`);
      else if (f.size > MAX_FILE_BYTES) refused.push(`${f.name}: ${formatSize(f.size)}, more than ${formatSize(MAX_FILE_BYTES)}`);
      else if (f.size === 0) refused.push(`${f.name}: empty`);
      else if (total + f.size > MAX_TOTAL_BYTES) refused.push(`${f.name}: the message would pass ${formatSize(MAX_TOTAL_BYTES)}`);
      else next.push(f);
    }
    setFiles(next);
    setError(refused.length ? "Not attached: " + refused.join("; ") : null);
  };
  const remove = (i: number) => setFiles(files.filter((_, j) => j !== i));
  const clear = () => {
    setFiles([]);
    setError(null);
  };
  // Drop and paste on the composer; a paste of text stays text.
  const handlers = {
    onDragOver: (e: DragEvent) => {
      if (e.dataTransfer?.types.includes("Files")) e.preventDefault();
    },
    onDrop: (e: DragEvent) => {
      if (!e.dataTransfer?.files.length) return;
      e.preventDefault();
      add(e.dataTransfer.files);
    },
    onPaste: (e: ClipboardEvent) => {
      const pasted = Array.from(e.clipboardData?.files ?? []);
      if (!pasted.length) return;
      e.preventDefault();
      add(pasted);
    },
  };
  return { files, error, setError, add, remove, clear, handlers };
}

export type AttachState = ReturnType<typeof useAttachments>;

/** AttachBar is the paperclip and the chips of the files to send. */
export function AttachBar({ a, disabled }: { a: AttachState; disabled?: boolean }) {
  const input = useRef<HTMLInputElement>(null);
  const total = a.files.reduce((n, f) => n + f.size, 0);
  return (
    <div class="attach-bar">
      <input ref={input} type="file" multiple hidden data-testid="attach-input"
        onChange={(e) => {
          const el = e.target as HTMLInputElement;
          if (el.files) a.add(el.files);
          el.value = "";
        }} />
      <button class="clip" aria-label="Attach files" title={`Attach files (at most ${MAX_FILES}, ${formatSize(MAX_FILE_BYTES)} each, ${formatSize(MAX_TOTAL_BYTES)} a message); or drop or paste them`}
        data-testid="attach" disabled={disabled} onClick={() => input.current?.click()}>
        <Clip />
      </button>
      {a.files.length > 0 && (
        <ul class="chips" aria-label="Files to attach" data-testid="attachments">
          {a.files.map((f, i) => (
            <li class="chip" key={i + f.name} data-testid="chip">
              <span class="chip-name">{f.name}</span>
              <span class="chip-size">{formatSize(f.size)}</span>
              <button aria-label={"Remove " + f.name} data-testid="chip-remove" onClick={() => a.remove(i)}>✕</button>
            </li>
          ))}
          <li class="chip-total" data-testid="attach-total">{a.files.length}/{MAX_FILES} · {formatSize(total)} of {formatSize(MAX_TOTAL_BYTES)}</li>
        </ul>
      )}
      {a.error && <p class="attach-error" role="alert" data-testid="attach-error">{a.error}</p>}
    </div>
  );
}
