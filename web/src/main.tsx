import { render } from "preact";
import { useEffect, useRef, useState, useMemo, useLayoutEffect } from "preact/hooks";
import { signal, computed, effect } from "@preact/signals";
import { api, ApiError, loginNeeded, type Conversation, type Me, type SearchResult } from "./api";
import { Session } from "./session";
import { TranscriptView } from "./view";
import { SidePanel } from "./panel";
import { Viewer } from "./workspace";
import { BudgetBadge, loadBudget } from "./budget";
import { TenantBudgetButton, TenantBudgetDialog } from "./tenantbudget";
import { Outbox } from "./outbox";
import { trapTab, modalOpen, focusComposer } from "./dialog";
import { AttachBar, uploadAll, useAttachments, withAttachments } from "./attach";

// Routing: /c/<id> opens a conversation; anything else the newest one.
const route = signal(location.pathname);
window.addEventListener("popstate", () => (route.value = location.pathname));
function navigate(path: string) {
  if (location.pathname !== path) history.pushState(null, "", path);
  route.value = path;
  drawerOpen.value = false;
}

// Below 1100 px the Changes and Issues panel, and below 700 px the
// conversation list too, live in a drawer the header's menu button opens.
const drawerOpen = signal(false);
const narrow = window.matchMedia("(max-width: 1100px)");
const currentId = computed(() => {
  const m = /^\/c\/([A-Za-z0-9][A-Za-z0-9_-]{0,127})$/.exec(route.value);
  return m ? m[1] : null;
});

const conversations = signal<Conversation[]>([]);
const listError = signal<string | null>(null);
/** showArchived lists archived conversations too, to unarchive them. */
const showArchived = signal(false);
async function loadList() {
  try {
    conversations.value = (await api.list(showArchived.value)).conversations;
    listError.value = null;
  } catch (e) {
    listError.value = (e as ApiError).message;
  }
  scheduleList();
}

// The list's running marks follow turns in other conversations too: it is
// read again while any turn runs, more slowly while none does, and at once
// when a turn of the open conversation starts or ends.
let listTimer: number | undefined;
function scheduleList() {
  clearTimeout(listTimer);
  const busy = conversations.value.some((c) => c.status === "running");
  listTimer = window.setTimeout(() => {
    if (document.visibilityState === "visible") loadList();
    else scheduleList();
  }, busy ? 2000 : 15000);
}
window.addEventListener("talkide:turn", (e) => {
  loadList();
  // The control-plane names a new conversation after its first message,
  // in the background: while the open one has no title, look again.
  const open = conversations.value.find((c) => c.id === currentId.value);
  if (open && !open.title) for (const ms of [1000, 3000, 8000]) setTimeout(loadList, ms);
  if ((e as CustomEvent).detail?.kind !== "turn.started") {
    // The turn's last call settles a moment after the turn ends (longer
    // on a loaded control-plane): read again shortly, and once more
    // later, so that the header does not stay one call behind.
    loadBudget();
    for (const ms of [1500, 5000]) setTimeout(loadBudget, ms);
  }
});

async function updateConversation(c: Conversation, change: { title?: string; archived?: boolean }) {
  try {
    await api.update(c.id, change);
    listError.value = null;
  } catch (e) {
    listError.value = (e as ApiError).message;
  }
  await loadList();
}

// Who is logged in; a session's user gets a Log out button. talkide dev's
// local user has nothing to log out of.
const me = signal<Me | null>(null);
async function loadMe() {
  try {
    me.value = await api.me();
    loginNeeded.value = false;
  } catch {
    me.value = null;
  }
}

async function logout() {
  try {
    await api.logout();
  } catch (e) {
    listError.value = (e as ApiError).message;
    return;
  }
  me.value = null;
  session.value?.close();
  session.value = null;
  conversations.value = [];
  loginNeeded.value = true;
}

function Account() {
  if (loginNeeded.value) {
    // The control-plane sends the browser back here after the login; it
    // keeps only a path on its own host.
    const back = location.pathname + location.search;
    return (
      <a class="login" data-testid="login" href={"/auth/login?return=" + encodeURIComponent(back)}>
        Log in
      </a>
    );
  }
  const m = me.value;
  if (!m || m.via !== "session") return null;
  return (
    <span class="account">
      <span data-testid="user">{m.user}</span>
      <button data-testid="logout" onClick={logout}>
        Log out
      </button>
    </span>
  );
}

const session = signal<Session | null>(null);
effect(() => {
  const id = currentId.value;
  const prev = session.peek();
  if (prev?.id === id) return;
  prev?.close();
  if (!id) {
    session.value = null;
    return;
  }
  const s = new Session(id);
  session.value = s;
  s.open();
});

async function newConversation(): Promise<string | null> {
  try {
    const c = await api.create();
    await loadList();
    navigate("/c/" + c.id);
    return c.id;
  } catch (e) {
    listError.value = (e as ApiError).message;
    return null;
  }
}

/** startWith opens a conversation with its first message: the message goes
 * into the new conversation's outbox first, so that its session sends it
 * once open, with the outbox's guarantees (one turn per id, a reload resends). */
async function startWith(text: string, files: File[] = []): Promise<boolean> {
  try {
    const c = await api.create();
    const done = await uploadAll(c.id, files);
    new Outbox(c.id).add(withAttachments(text, done), undefined, done.map((d) => d.path));
    navigate("/c/" + c.id);
    loadList();
    return true;
  } catch (e) {
    listError.value = (e as ApiError).message;
    return false;
  }
}

const switcherOpen = signal(false);
function closeSwitcher() {
  switcherOpen.value = false;
  // After the dialog, the user goes on typing where they were.
  setTimeout(focusComposer, 0);
}

function ConnBadge({ s }: { s: Session | null }) {
  // Without an open conversation the pill says whether the control-plane
  // answered the list, which is what starting one needs.
  const state = s ? s.conn.value : listError.value ? "offline" : "idle";
  const label = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", offline: "offline", idle: "ready" }[state];
  return (
    <span class={"conn conn-" + state} data-testid="conn" data-state={state} role="status" aria-live="polite">
      {label}
    </span>
  );
}

/** Rename is the inline title editor: Enter saves, Escape gives up. */
function Rename({ c, done }: { c: Conversation; done: () => void }) {
  const [v, setV] = useState(c.title);
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => {
    input.current?.focus();
    input.current?.select();
  }, []);
  const save = async () => {
    const t = v.trim();
    if (t && t !== c.title) await updateConversation(c, { title: t });
    done();
  };
  return (
    <input
      ref={input}
      class="rename"
      data-testid="rename-input"
      aria-label={"New title for " + (c.title || c.id)}
      value={v}
      maxLength={200}
      onInput={(e) => setV((e.target as HTMLInputElement).value)}
      onKeyDown={(e) => {
        if (e.key === "Enter") {
          e.preventDefault();
          save();
        } else if (e.key === "Escape") {
          e.preventDefault();
          e.stopPropagation();
          done();
        }
      }}
      onBlur={done}
    />
  );
}

function openDrawer() {
  drawerOpen.value = true;
  // Keyboard and screen-reader users land in what just opened.
  setTimeout(() => document.querySelector<HTMLElement>("[data-testid=drawer-close]")?.focus(), 0);
}

function closeDrawer() {
  drawerOpen.value = false;
  setTimeout(focusComposer, 0);
}

/** displayName is what the list calls a conversation: its title, or, until
 * the control-plane names it, "New conversation" (its id is in the tooltip). */
function displayName(c: Conversation): string {
  return c.title || "New conversation";
}

/** touchLocal moves conversation id to the top of the list at once when a
 * message is sent in it, as the next read of the list will. */
function touchLocal(id: string) {
  const cs = conversations.value;
  const i = cs.findIndex((c) => c.id === id);
  if (i <= 0) return;
  const moved = { ...cs[i], last_activity_at: new Date().toISOString() };
  conversations.value = [moved, ...cs.slice(0, i), ...cs.slice(i + 1)];
}
window.addEventListener("talkide:sent", (e) => touchLocal((e as CustomEvent).detail?.conversation));

function Sidebar() {
  const cur = currentId.value;
  const [editing, setEditing] = useState<string | null>(null);
  return (
    <nav class="sidebar" aria-label="Conversations">
      <button class="new" onClick={newConversation} data-testid="new-conversation">
        + New conversation
      </button>
      <p class="hint">Ctrl+K: switch</p>
      <label class="show-archived">
        <input
          type="checkbox"
          data-testid="show-archived"
          checked={showArchived.value}
          onChange={(e) => {
            showArchived.value = (e.target as HTMLInputElement).checked;
            loadList();
          }}
        />{" "}
        Show archived
      </label>
      {listError.value && <p class="error" role="alert">{listError.value}</p>}
      <ul>
        {conversations.value.map((c) => {
          const name = displayName(c);
          const running = c.id === cur ? !!session.value?.t.value.running.value : c.status === "running";
          const archived = !!c.archived_at;
          return (
            <li key={c.id} data-conversation={c.id} data-status={running ? "running" : "idle"} data-archived={archived ? "1" : "0"} class={archived ? "archived" : undefined}>
              {editing === c.id ? (
                <Rename c={c} done={() => setEditing(null)} />
              ) : (
                <a
                  href={"/c/" + c.id}
                  aria-current={c.id === cur ? "page" : undefined}
                  onClick={(e) => {
                    e.preventDefault();
                    navigate("/c/" + c.id);
                  }}
                >
                  <span class="title" data-testid="conversation-title" data-untitled={c.title ? undefined : "1"} title={c.id}>{name}</span>
                  {running && <span class="running" role="img" aria-label="running" data-testid="running">●</span>}
                  {archived && <span class="badge">archived</span>}
                  <time dateTime={c.last_activity_at ?? c.created_at} title="Last activity">{new Date(c.last_activity_at ?? c.created_at).toLocaleString()}</time>
                </a>
              )}
              <div class="conv-actions">
                <button aria-label={"Rename " + name} data-testid="rename" onClick={() => setEditing(c.id)}>
                  Rename
                </button>
                <button
                  aria-label={(archived ? "Unarchive " : "Archive ") + name}
                  data-testid={archived ? "unarchive" : "archive"}
                  onClick={() => updateConversation(c, { archived: !archived })}
                >
                  {archived ? "Unarchive" : "Archive"}
                </button>
              </div>
            </li>
          );
        })}
      </ul>
    </nav>
  );
}

/** The switcher matches titles in the list at once and, from two
 * characters on, the text of messages and replies through the search
 * endpoint, 250 ms after the last keystroke. */
const searchDelay = 250;

/** words splits a query as the control-plane does: letters, digits and marks. */
function words(q: string): string[] {
  return q.toLowerCase().split(/[^\p{L}\p{N}\p{M}]+/u).filter(Boolean);
}

/** Highlight marks the words of text that begin with a word of the query. */
function Highlight({ text, q }: { text: string; q: string }) {
  const ws = words(q);
  const parts = text.split(/([\p{L}\p{N}\p{M}]+)/u);
  return (
    <>
      {parts.map((p, i) => (i % 2 === 1 && ws.some((w) => p.toLowerCase().startsWith(w)) ? <mark key={i}>{p}</mark> : p))}
    </>
  );
}

interface Hit {
  c: Conversation;
  kind?: string;
  snippet?: string;
}

function Switcher() {
  const [q, setQ] = useState("");
  const [sel, setSel] = useState(0);
  const [found, setFound] = useState<{ q: string; results: SearchResult[] }>({ q: "", results: [] });
  const [searchError, setSearchError] = useState<string | null>(null);
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => input.current?.focus(), []);
  useEffect(() => {
    const query = q.trim();
    if (query.length < 2) {
      setFound({ q: "", results: [] });
      setSearchError(null);
      return;
    }
    let stale = false;
    const timer = window.setTimeout(async () => {
      try {
        const r = await api.search(query);
        if (!stale) {
          setFound({ q: query, results: r.results });
          setSearchError(null);
        }
      } catch (e) {
        if (!stale) setSearchError((e as ApiError).message);
      }
    }, searchDelay);
    return () => {
      stale = true;
      clearTimeout(timer);
    };
  }, [q]);
  const needle = q.trim().toLowerCase();
  const byId = new Map(found.results.map((r) => [r.conversation.id, r]));
  const hits: Hit[] = conversations.value
    .filter((c) => (c.title + " " + c.id).toLowerCase().includes(needle))
    .slice(0, 20)
    .map((c) => ({ c, kind: byId.get(c.id)?.kind, snippet: byId.get(c.id)?.snippet }));
  for (const r of found.results) {
    if (!hits.some((h) => h.c.id === r.conversation.id)) hits.push({ c: r.conversation, kind: r.kind, snippet: r.snippet });
  }
  const box = useRef<HTMLDivElement>(null);
  const open = (h: Hit | undefined) => {
    if (!h) return;
    closeSwitcher();
    navigate("/c/" + h.c.id);
  };
  return (
    <div class="switcher-backdrop" onClick={closeSwitcher}>
      <div class="switcher" ref={box} role="dialog" aria-modal="true" aria-label="Switch conversation" data-testid="switcher"
        onClick={(e) => e.stopPropagation()}
        onKeyDown={(e) => {
          trapTab(e, box.current);
          // Esc belongs to the dialog: it must not reach the page's handler,
          // which would stop the running turn.
          if (e.key === "Escape") {
            e.preventDefault();
            e.stopPropagation();
            closeSwitcher();
          }
        }}>
        <input
          ref={input}
          aria-label="Search conversations"
          data-testid="switcher-input"
          placeholder="Go to conversation, or search messages…"
          value={q}
          onInput={(e) => {
            setQ((e.target as HTMLInputElement).value);
            setSel(0);
          }}
          onKeyDown={(e) => {
            if (e.key === "ArrowDown") setSel(Math.min(sel + 1, hits.length - 1));
            else if (e.key === "ArrowUp") setSel(Math.max(sel - 1, 0));
            else if (e.key === "Enter") open(hits[sel]);
            else return;
            e.preventDefault();
          }}
        />
        {searchError && <p class="error" role="alert">{searchError}</p>}
        <ul role="listbox" data-testid="switcher-hits" data-searched={found.q}>
          {hits.map((h, i) => (
            <li key={h.c.id} role="option" aria-selected={i === sel} onClick={() => open(h)}
              data-testid="switcher-hit" data-conversation={h.c.id} data-kind={h.kind}>
              <span class="title">{displayName(h.c)}</span>
              {h.snippet && h.kind !== "title" && (
                <span class="snippet" data-testid="snippet">
                  <Highlight text={h.snippet} q={found.q} />
                </span>
              )}
            </li>
          ))}
        </ul>
      </div>
    </div>
  );
}

/** MessageBox is where a message is written: Enter sends it (not while
 * an input method is composing), Shift+Enter starts a new line, and Esc
 * goes to onEscape, which says whether it took the key. */
function MessageBox({ area, text, setText, placeholder, onSend, onEscape }: {
  area: { current: HTMLTextAreaElement | null };
  text: string;
  setText: (t: string) => void;
  placeholder: string;
  onSend: () => void;
  onEscape?: () => boolean;
}) {
  return (
    <textarea ref={area} aria-label="Message to Mara" data-testid="composer" rows={3}
      placeholder={placeholder}
      value={text}
      onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
      onKeyDown={(e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          onSend();
        } else if (e.key === "Escape" && onEscape?.()) {
          e.preventDefault();
        }
      }} />
  );
}

/** DraftComposer is the composer before any conversation: the first
 * message starts one. */
function DraftComposer() {
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const a = useAttachments();
  const area = useRef<HTMLTextAreaElement>(null);
  useEffect(() => area.current?.focus(), []);
  const empty = !text.trim() && !a.files.length;
  const send = async () => {
    if (empty || busy) return;
    setBusy(true);
    if (await startWith(text, a.files)) {
      setText("");
      a.clear();
    }
    setBusy(false);
  };
  return (
    <div class="composer draft" {...a.handlers}>
      <AttachBar a={a} disabled={busy} />
      <div class="row">
        <MessageBox area={area} text={text} setText={setText} onSend={send}
          placeholder="Ask Mara anything to start a conversation (Enter sends, Shift+Enter new line)" />
        <div class="actions">
          <button onClick={send} disabled={empty || busy} data-testid="send">Send</button>
        </div>
      </div>
      <p class="status" role="status" aria-live="polite" data-testid="turn-status">{busy ? "starting a conversation…" : ""}</p>
    </div>
  );
}

function Composer({ s }: { s: Session }) {
  const [text, setText] = useState("");
  const area = useRef<HTMLTextAreaElement>(null);
  const running = s.t.value.running.value;
  const queued = s.outbox.items.value.filter((p) => p.state === "queued");
  const a = useAttachments();
  const [uploading, setUploading] = useState(false);
  useEffect(() => area.current?.focus(), [s]);
  const empty = !text.trim() && !a.files.length;
  const send = async () => {
    if (empty || uploading) return;
    if (!a.files.length) {
      s.submit(text);
      setText("");
      return;
    }
    // The files land in the workspace first; the message, which names
    // them, is queued only once they all have.
    setUploading(true);
    try {
      const done = await uploadAll(s.id, a.files);
      s.submit(withAttachments(text, done), done.map((d) => d.path));
      setText("");
      a.clear();
    } catch (e) {
      a.setError("Not sent: an upload failed: " + (e as ApiError).message);
    } finally {
      setUploading(false);
    }
  };
  return (
    <div class="composer" {...a.handlers}>
      {queued.length > 0 && (
        <ol class="queue" aria-label="Queued messages" data-testid="queue">
          {queued.map((p) => (
            <li key={p.cmid}>
              <span class="badge">queued</span>
              <input
                aria-label="Queued message"
                value={p.text}
                onInput={(e) => s.outbox.update(p.cmid, { text: (e.target as HTMLInputElement).value })}
              />
              <button aria-label="Remove queued message" onClick={() => s.outbox.remove(p.cmid)}>
                ✕
              </button>
            </li>
          ))}
        </ol>
      )}
      <AttachBar a={a} disabled={uploading} />
      <div class="row">
        <MessageBox area={area} text={text} setText={setText} onSend={send}
          placeholder={running ? "Mara is working; what you send now waits in the queue (Esc stops the turn)" : "Message Mara (Enter sends, Shift+Enter new line)"}
          onEscape={() => {
            // Esc closes an open dialog or drawer first (their own handlers).
            if (modalOpen() || (drawerOpen.value && narrow.matches)) return false;
            s.interrupt();
            return true;
          }} />
        <div class="actions">
          <button onClick={send} disabled={empty || uploading} data-testid="send">
            {running ? "Queue" : "Send"}
          </button>
          {running && (
            <button class="stop" onClick={() => s.interrupt()} disabled={s.stopping.value} data-testid="stop">
              {s.stopping.value ? "stopping…" : "Stop (Esc)"}
            </button>
          )}
        </div>
      </div>
      <p class="status" role="status" aria-live="polite" data-testid="turn-status">
        {uploading ? `uploading ${a.files.length} file${a.files.length > 1 ? "s" : ""}…` : s.stopping.value ? "stopping…" : running ? "Mara is working…" : ""}
      </p>
    </div>
  );
}

function App() {
  useEffect(() => {
    loadList();
    loadBudget();
    loadMe();
    const onKey = (e: KeyboardEvent) => {
      if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "k") {
        e.preventDefault();
        switcherOpen.value = !switcherOpen.value;
      } else if (e.key === "Escape") {
        // Esc closes what is open first; it stops the turn only when
        // nothing is (a dialog's own handler stops it reaching here, and
        // this check covers one that does not).
        if (switcherOpen.value) closeSwitcher();
        else if (drawerOpen.value && narrow.matches) closeDrawer();
        else if (!modalOpen() && session.value && document.activeElement?.tagName !== "TEXTAREA") session.value.interrupt();
      }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, []);
  useEffect(() => {
    // Opening the app without a conversation shows the newest one.
    if (!currentId.value && conversations.value.length && route.value === "/") navigate("/c/" + conversations.value[0].id);
  }, [conversations.value]);
  const s = session.value;
  const open = conversations.value.find((c) => c.id === s?.id);
  const title = open ? displayName(open) : "";
  useEffect(() => {
    document.title = title ? title + " — Mara" : s ? "Mara" : "New conversation — Mara";
  }, [title, s]);
  return (
    <div class={"app" + (drawerOpen.value ? " drawer-open" : "")}>
      <header>
        <button class="menu" data-testid="menu" aria-label="Conversations, changes and issues" aria-expanded={drawerOpen.value} aria-controls="drawer"
          onClick={() => (drawerOpen.value ? closeDrawer() : openDrawer())}>
          ☰
        </button>
        <h1>Mara</h1>
        <span class="conv-title" data-testid="conv-title">{title || (s ? "" : "New conversation")}</span>
        <BudgetBadge />
        <TenantBudgetButton me={me.value} />
        <ConnBadge s={s} />
        <Account />
      </header>
      <main>
        {s ? (
          <>
            {s.error.value && <p class="error banner" role="alert">{s.error.value}</p>}
            <TranscriptView s={s} />
            <Composer s={s} />
          </>
        ) : (
          <>
            <div class="empty" data-testid="empty">
              <h2>What should Mara work on?</h2>
              <p class="meta">Your first message starts a conversation.</p>
            </div>
            <DraftComposer />
          </>
        )}
      </main>
      {drawerOpen.value && <div class="drawer-backdrop" data-testid="drawer-backdrop" onClick={closeDrawer} />}
      <div class="drawer" id="drawer" data-testid="drawer">
        {drawerOpen.value && (
          <button class="drawer-close" data-testid="drawer-close" aria-label="Close the menu" onClick={closeDrawer}>
            ✕ Close
          </button>
        )}
        <Sidebar />
        {s && <SidePanel s={s} />}
      </div>
      {switcherOpen.value && <Switcher />}
      <TenantBudgetDialog />
      <Viewer />
    </div>
  );
}

render(<App />, document.getElementById("app")!);
