import { useState } from "preact/hooks";
import type { Session } from "./session";
import { FilesTree, openViewer, workspacePath } from "./workspace";

/** SidePanel shows what the conversation changed, its workspace's files and the issues Mara filed. */
export function SidePanel({ s }: { s: Session }) {
  const [tab, setTab] = useState<"changes" | "files" | "issues">("changes");
  const changes = s.t.value.changes.value;
  const issues = s.issues.value;
  const files = new Map<string, { count: number; key: string }>();
  for (const c of changes) files.set(c.path, { count: (files.get(c.path)?.count ?? 0) + 1, key: c.toolKey });
  return (
    <aside class="panel" aria-label="Conversation details">
      <div role="tablist">
        <button role="tab" aria-selected={tab === "changes"} onClick={() => setTab("changes")} data-testid="changes-tab">
          Changes ({files.size})
        </button>
        <button role="tab" aria-selected={tab === "files"} onClick={() => setTab("files")} data-testid="files-tab">
          Files
        </button>
        <button role="tab" aria-selected={tab === "issues"} onClick={() => setTab("issues")} data-testid="issues-tab">
          Issues ({issues.length})
        </button>
      </div>
      {tab === "changes" ? (
        <ul class="changes" data-testid="changes">
          {files.size === 0 && <li class="meta">No file edited yet.</li>}
          {[...files].map(([path, f]) => (
            <li key={path}>
              <button class="change" data-testid="change" data-path={path} title="Show what the conversation changed in this file"
                onClick={() => openViewer({ conv: s.id, kind: "diff", target: workspacePath(path, s.id) })}>
                <code>{path}</code>
              </button>{" "}
              <span class="meta">{f.count} edit{f.count === 1 ? "" : "s"}</span>
            </li>
          ))}
        </ul>
      ) : tab === "files" ? (
        <FilesTree s={s} />
      ) : (
        <ul class="issues" data-testid="issues">
          {issues.length === 0 && <li class="meta">No issue filed.</li>}
          {issues.map((i) => (
            <li key={i.id} data-issue={i.id}>
              <div>
                <span class={"sev sev-" + i.severity}>{i.severity}</span> <strong>{i.title}</strong>{" "}
                <span class="meta">{i.status}</span>
              </div>
              <div class="issue-body">{i.body}</div>
              {(i.labels ?? []).map((l) => (
                <span class="label" key={l}>{l}</span>
              ))}
            </li>
          ))}
        </ul>
      )}
    </aside>
  );
}
