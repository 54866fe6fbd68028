// The conversation's workspace: a read-only file tree, a viewer for a
// file, for what the conversation changed in one (a diff with line
// numbers and context) and for a tool output kept whole on the session
// volume. Everything is read from the control-plane's workspace view
// (docs/webui.md, "The workspace"), which the worker confines as it does
// the agent's own file tools.
import { signal } from "@preact/signals";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { api, ApiError, workspaceURL, toolOutputURL, type WorkspaceEntry, type WorkspaceListing, type WorkspaceFile, type WorkspaceDiff, type ToolOutput } from "./api";
import { dialogKeys, focusComposer } from "./dialog";
import { highlightCode, languageOf } from "./markdown";
import type { Session } from "./session";

/** What the viewer shows: a file, its diff, or a kept tool output (target is its name). */
export interface Viewing {
  conv: string;
  kind: "file" | "diff" | "output";
  target: string;
}

export const viewing = signal<Viewing | null>(null);

/** openViewer shows v; the element that had the focus gets it back on close. */
export function openViewer(v: Viewing) {
  returnFocus = document.activeElement as HTMLElement | null;
  viewing.value = v;
}
let returnFocus: HTMLElement | null = null;

/** workspacePath turns a path a tool was given into the workspace view's
 * form: relative, without "./". An absolute path is made relative when it
 * runs through the conversation's own directory (the worker's workspaces
 * are named by conversation id); otherwise it is left as it is, and the
 * view answers why it will not show it. */
export function workspacePath(p: string, conv: string): string {
  let out = p.replace(/\/{2,}/g, "/");
  const mark = "/" + conv + "/";
  if (out.startsWith("/") && out.includes(mark)) out = out.slice(out.lastIndexOf(mark) + mark.length);
  while (out.startsWith("./")) out = out.slice(2);
  return out.replace(/\/$/, "") || ".";
}

/** spilledOutput finds the note a tool adds when it kept its whole output, and the file's name. */
export function spilledOutput(output: string): string | null {
  const m = /\[(?:the )?full output \(\d+ bytes\)[^\]\n]* as tool-output\/([A-Za-z0-9_-]{1,200}\.txt)\]\s*$/.exec(output);
  return m ? m[1] : null;
}

function fmtSize(n?: number): string {
  if (n == null) return "";
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

/** FilesTree is the Files tab: the workspace's root, directories opening in place. */
export function FilesTree({ s }: { s: Session }) {
  // Read again whenever the agent may have changed the tree: a file tool's
  // change, and the end of a turn (commands change files too).
  const t = s.t.value;
  const version = t.changes.value.length + ":" + (t.running.value ? "r" : "i");
  const [refresh, setRefresh] = useState(0);
  return (
    <div class="files" data-testid="files">
      <div class="files-head">
        <span class="meta">Workspace (read-only)</span>
        <button class="act" data-testid="files-refresh" onClick={() => setRefresh((n) => n + 1)}>Refresh</button>
      </div>
      <Dir conv={s.id} path="." depth={0} version={version + ":" + refresh} />
    </div>
  );
}

function Dir({ conv, path, depth, version }: { conv: string; path: string; depth: number; version: string }) {
  const [listing, setListing] = useState<WorkspaceListing | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    let live = true;
    api.workspaceList(conv, path).then(
      (l) => live && (setListing(l), setError("")),
      (e: ApiError) => live && setError(e.message),
    );
    return () => {
      live = false;
    };
  }, [conv, path, version]);
  if (error) return <p class="error" role="alert" data-testid="files-error">{error}</p>;
  if (!listing) return <p class="meta">reading…</p>;
  return (
    <ul class="tree" role={depth === 0 ? "tree" : "group"} aria-label={depth === 0 ? "Workspace files" : undefined}>
      {listing.entries.length === 0 && <li class="meta">{depth === 0 ? "The workspace is empty." : "empty"}</li>}
      {listing.entries.map((e) => (
        <Entry key={e.name} conv={conv} dir={path} e={e} depth={depth} version={version} />
      ))}
      {listing.truncated && <li class="meta">… more entries than the view lists</li>}
    </ul>
  );
}

function Entry({ conv, dir, e, depth, version }: { conv: string; dir: string; e: WorkspaceEntry; depth: number; version: string }) {
  const [open, setOpen] = useState(false);
  const path = dir === "." ? e.name : dir + "/" + e.name;
  const isDir = e.kind === "dir" || (e.kind === "symlink" && e.target_kind === "dir");
  const isFile = e.kind === "file" || (e.kind === "symlink" && e.target_kind === "file");
  const link = e.kind === "symlink" ? (e.outside ? " → outside the workspace" : e.target ? " → " + e.target : " (broken)") : "";
  return (
    <li role="treeitem" aria-expanded={isDir ? open : undefined} data-path={path} data-kind={e.kind}>
      {isDir ? (
        <button class="tree-item dir" data-testid="tree-dir" onClick={() => setOpen(!open)} title={path}>
          <span aria-hidden="true">{open ? "▾ " : "▸ "}</span>
          {e.name}/<span class="meta">{link}</span>
        </button>
      ) : isFile ? (
        <button class="tree-item file" data-testid="tree-file" onClick={() => openViewer({ conv, kind: "file", target: path })} title={path}>
          {e.name}
          <span class="meta">{link} {fmtSize(e.size)}</span>
        </button>
      ) : (
        <span class="tree-item other" title={e.kind === "other" ? "not a regular file" : "a symlink the view does not follow"}>
          {e.name}
          <span class="meta">{link}</span>
        </span>
      )}
      {isDir && open && <Dir conv={conv} path={path} depth={depth + 1} version={version} />}
    </li>
  );
}

type Loaded = { file: WorkspaceFile } | { diff: WorkspaceDiff } | { output: ToolOutput } | { error: string } | null;

/** Viewer is the modal that shows what viewing names. */
export function Viewer() {
  const v = viewing.value;
  if (!v) return null;
  return <ViewerDialog key={v.conv + v.kind + v.target} v={v} />;
}

function close() {
  viewing.value = null;
  const back = returnFocus;
  returnFocus = null;
  setTimeout(() => (back && document.contains(back) ? back.focus() : focusComposer()), 0);
}

function ViewerDialog({ v }: { v: Viewing }) {
  const box = useRef<HTMLDivElement>(null);
  const closeBtn = useRef<HTMLButtonElement>(null);
  const [loaded, setLoaded] = useState<Loaded>(null);
  useEffect(() => closeBtn.current?.focus(), []);
  useEffect(() => {
    const fail = (e: ApiError) => setLoaded({ error: e.message });
    if (v.kind === "file") api.workspaceFile(v.conv, v.target).then((file) => setLoaded({ file }), fail);
    else if (v.kind === "diff") api.workspaceDiff(v.conv, v.target).then((diff) => setLoaded({ diff }), fail);
    else api.toolOutput(v.conv, v.target).then((output) => setLoaded({ output }), fail);
  }, []);
  const download = v.kind === "file" ? workspaceURL(v.conv, "file", v.target) + "&download=1" : v.kind === "output" ? toolOutputURL(v.conv, v.target) + "&download=1" : "";
  const title = v.kind === "diff" ? "Changes to " + v.target : v.kind === "output" ? "Full output " + v.target : v.target;
  return (
    <div class="switcher-backdrop viewer-backdrop" onClick={close}>
      <div class="viewer" ref={box} role="dialog" aria-modal="true" aria-label={title} data-testid="viewer" data-kind={v.kind} data-target={v.target}
        onClick={(e) => e.stopPropagation()}
        onKeyDown={(e) => dialogKeys(e, box.current, close)}>
        <div class="viewer-head">
          <code class="viewer-title" data-testid="viewer-title">{title}</code>
          {loaded && "file" in loaded && <span class="meta">{fmtSize(loaded.file.size)} · {new Date(loaded.file.mtime).toLocaleString()}</span>}
          {download && loaded && !("error" in loaded) && (
            <a class="act" href={download} download data-testid="viewer-download">Download</a>
          )}
          {v.kind === "diff" && (
            <button class="act" data-testid="viewer-open-file" onClick={() => (viewing.value = { ...v, kind: "file" })}>Open the file</button>
          )}
          <button ref={closeBtn} class="act" onClick={close} data-testid="viewer-close">Close</button>
        </div>
        <div class="viewer-body">
          {loaded === null ? (
            <p class="meta">reading…</p>
          ) : "error" in loaded ? (
            <p class="error" role="alert" data-testid="viewer-error">{loaded.error}</p>
          ) : "file" in loaded ? (
            loaded.file.binary ? (
              <p class="meta" data-testid="viewer-binary">A binary file of {fmtSize(loaded.file.size)}: download it to open it.</p>
            ) : (
              <Code text={loaded.file.content ?? ""} lang={languageOf(v.target)} />
            )
          ) : "diff" in loaded ? (
            <Diff d={loaded.diff} />
          ) : (
            <>
              {loaded.output.truncated && (
                <p class="meta" data-testid="viewer-truncated">
                  The first {fmtSize(loaded.output.content.length)} of {fmtSize(loaded.output.size)}.
                </p>
              )}
              <Code text={loaded.output.content} lang="" />
            </>
          )}
        </div>
      </div>
    </div>
  );
}

/** Code shows text with line numbers in a gutter beside it: one <pre> each,
 * so that highlighting that spans lines stays whole. */
function Code({ text, lang }: { text: string; lang: string }) {
  const html = useMemo(() => highlightCode(text, lang), [text, lang]);
  const n = text === "" ? 0 : text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
  const gutter = useMemo(() => Array.from({ length: n }, (_, i) => i + 1).join("\n"), [n]);
  if (n === 0) return <p class="meta" data-testid="viewer-empty">The file is empty.</p>;
  return (
    <div class="code-view" data-testid="viewer-code" data-lines={n} data-lang={lang || undefined}>
      <pre class="gutter" aria-hidden="true" data-testid="viewer-gutter">{gutter}</pre>
      <pre class="code"><code class={lang ? "hljs language-" + lang : undefined} dangerouslySetInnerHTML={{ __html: html }} /></pre>
    </div>
  );
}

function Diff({ d }: { d: WorkspaceDiff }) {
  const lang = languageOf(d.path);
  return (
    <div class="file-diff" data-testid="viewer-diff">
      <p class="meta">
        {d.created && d.deleted ? "Created by the conversation, then deleted." : d.created ? "Created by the conversation." : d.deleted ? "Deleted since the conversation changed it." : "Against the file as it was before the conversation first changed it."}
        {" "}{d.context} lines of context.
      </p>
      {d.binary && <p class="meta" data-testid="viewer-binary">A binary file: no line diff.</p>}
      {!d.binary && d.hunks.length === 0 && !d.deleted && <p class="meta" data-testid="viewer-nochange">No difference: the file is as it was.</p>}
      {d.hunks.map((h, i) => (
        <table class="hunk" key={i} data-testid="diff-hunk">
          <thead>
            <tr>
              <th colSpan={4} class="hunk-head">@@ −{h.old_start},{h.old_lines} +{h.new_start},{h.new_lines} @@</th>
            </tr>
          </thead>
          <tbody>
            {h.lines.map((l, j) => (
              <tr key={j} class={"dl " + l.kind} data-kind={l.kind} data-old={l.old_line} data-new={l.new_line}>
                <td class="ln">{l.old_line ?? ""}</td>
                <td class="ln">{l.new_line ?? ""}</td>
                <td class="sign">{l.kind === "added" ? "+" : l.kind === "removed" ? "−" : " "}</td>
                <td class="text"><code dangerouslySetInnerHTML={{ __html: highlightCode(l.text, lang) }} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      ))}
    </div>
  );
}
