import { useContext, useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { AttachedChips, splitAttachments } from "./attach";
import { Component, createContext, type ComponentChildren } from "preact";
import { signal } from "@preact/signals";
import { diffLines } from "diff";
import type { Session } from "./session";
import { userTextOf, type Item, type ToolItem, type TextItem, type FooterItem, type UserItem, type NoticeItem, type Transcript } from "./transcript";
import { render as renderMarkdown, renderUser } from "./markdown";
import { turnCosts, fmtUSD } from "./costs";
import { useFollow } from "./follow";
import { addCodeCopy, onCodeCopyClick, flashCopy } from "./copy";
import { toolLabel, stopReason, failureTitle } from "./names";
import { rememberedOpen, rememberOpen } from "./toolstate";
import { openViewer, spilledOutput } from "./workspace";

/** The open conversation, for the items' actions (copy, edit, retry). */
const SessionCtx = createContext<Session | null>(null);

/** Live output shown before "show all". */
const OUTPUT_CAP = 4000;
/** Opening a conversation renders its newest items first, then the older
 * ones of the page this many a frame: the last message shows without
 * waiting for the Markdown of the whole page, and no frame is long. */
const FIRST_ITEMS = 30;
const ITEMS_PER_FRAME = 15;

export function TranscriptView({ s }: { s: Session }) {
  const t = s.t.value;
  const items = t.items.value;
  const scroller = useRef<HTMLDivElement>(null);
  const inner = useRef<HTMLDivElement>(null);
  const anchor = useRef<{ height: number; top: number } | null>(null);
  const follow = useFollow(scroller, inner, anchor, s);
  const sent = s.sent.value;
  // A message of one's own always brings the view back to the end.
  useEffect(() => {
    if (sent > 0) follow.toBottom();
  }, [sent]);
  // Items at the front not rendered yet (see FIRST_ITEMS); only the first
  // page of a transcript is rendered this way, so an older page put in
  // front renders at once, under the scroll anchor.
  const [hidden, setHidden] = useState(0);
  const firstPage = useRef<Transcript | null>(null);
  if (firstPage.current === null && items.length > 0) {
    firstPage.current = t;
    if (items.length > FIRST_ITEMS) setHidden(items.length - FIRST_ITEMS);
  }
  useEffect(() => {
    if (hidden <= 0) return;
    const f = requestAnimationFrame(() => setHidden((h) => Math.max(0, h - ITEMS_PER_FRAME)));
    return () => cancelAnimationFrame(f);
  }, [hidden]);
  const from = firstPage.current === t ? hidden : 0;

  const onScroll = () => {
    const el = scroller.current!;
    if (el.scrollTop < 300 && s.hasMore.value && !s.loadingOlder.value) {
      anchor.current = { height: el.scrollHeight, top: el.scrollTop };
      s.loadOlder().then((ok) => {
        if (!ok) anchor.current = null;
      });
    }
  };

  return (
    <SessionCtx.Provider value={s}>
    <div class="transcript-wrap">
      <div class={"transcript" + (follow.following ? "" : " away")} ref={scroller} onScroll={onScroll} data-testid="transcript" aria-label="Transcript" role="log" tabIndex={0}>
        <div ref={inner} data-seqs={t.loose.value.join(" ")} data-testid="transcript-items" data-unrendered={from > 0 ? from : undefined}>
          {s.hasMore.value && (
            <button class="older" onClick={() => s.loadOlder()} disabled={s.loadingOlder.value}>
              {s.loadingOlder.value ? "loading…" : "Load older messages"}
            </button>
          )}
          {(from > 0 ? items.slice(from) : items).map((it) => (
            <ItemView key={it.key} it={it} />
          ))}
          {s.outbox.items.value
            .filter((p) => p.state === "sending")
            .map((p) => (
              <div class="msg user pending" key={p.cmid} data-testid="pending">
                <div class="body md" dangerouslySetInnerHTML={{ __html: renderUser(splitAttachments(p.text).text) }} />
                <AttachedChips chips={splitAttachments(p.text).chips} />
                <div class="meta">sending…</div>
              </div>
            ))}
        </div>
      </div>
      {!follow.following && (
        <button class="jump" data-testid="jump" onClick={follow.toBottom}>
          ↓ Jump to latest
        </button>
      )}
    </div>
    </SessionCtx.Provider>
  );
}

// An item re-renders on its own version (forceUpdate passes the check
// below); appending to the list re-renders the list, not every item.
class ItemView extends Component<{ it: Item }> {
  private off?: () => void;
  componentDidMount() {
    let first = true;
    this.off = this.props.it.v.subscribe(() => {
      if (first) first = false;
      else this.forceUpdate();
    });
  }
  componentWillUnmount() {
    this.off?.();
  }
  shouldComponentUpdate(next: { it: Item }) {
    return next.it !== this.props.it;
  }
  render() {
    // The version goes down as a prop: @preact/signals skips a child whose
    // props did not change, and the item object itself is the same.
    const it = this.props.it;
    const v = it.v.peek();
    switch (it.type) {
      case "notice":
        return <Notice it={it} v={v} />;
      case "user":
        return <User it={it} v={v} />;
      case "text":
        return <Text it={it} v={v} />;
      case "tool":
        return <Tool it={it} v={v} />;
      case "footer":
        return <Footer it={it} v={v} />;
    }
  }
}

function Notice({ it }: { it: NoticeItem; v: number }) {
  // A repeat still names its events (the page shows the whole log), unseen.
  return (
    <div class="notice" hidden={it.repeat} data-repeat={it.repeat ? "1" : undefined} data-seq={it.seq} data-seqs={seqs(it)} data-kind="notice">
      {it.text}
    </div>
  );
}

/** copyButton copies text; flashCopy owns its label (Preact leaves the
 * children of an element with dangerouslySetInnerHTML alone). */
function copyButton(text: string, label: string) {
  return <button class="act" data-testid="copy" aria-label={label} onClick={(e) => flashCopy(e.currentTarget, text)} dangerouslySetInnerHTML={{ __html: "Copy" }} />;
}

function User({ it }: { it: UserItem; v: number }) {
  const s = useContext(SessionCtx);
  const t = s?.t.value;
  // Only the last message can be edited, and not while its turn runs.
  const editable = !!t && t.lastUser.value === it && !t.running.value && !it.superseded;
  const parts = useMemo(() => splitAttachments(it.text), [it.text]);
  const html = useMemo(() => renderUser(parts.text), [parts.text]);
  return (
    <div class={"msg-wrap user" + (it.superseded ? " superseded" : "")}>
      <div class="msg user" data-seq={it.seq} data-seqs={seqs(it)} data-kind="user.message" data-cmid={it.clientMessageId}
        data-superseded={it.superseded ? "1" : undefined} data-edited={it.edited ? "1" : undefined}>
        {parts.text && <div class="body md" dangerouslySetInnerHTML={{ __html: html }} />}
        <AttachedChips chips={parts.chips} />
      </div>
      {editable ? <EditLast it={it} s={s!} /> : <UserActions it={it} />}
    </div>
  );
}

function UserActions({ it, children }: { it: UserItem; children?: ComponentChildren }) {
  return (
    <div class="msg-actions">
      {it.edited && <span class="badge" data-testid="edited">edited</span>}
      {it.superseded && <span class="badge" data-testid="superseded" title="You edited this message and sent it again below; the earlier turn stays in the history.">edited below</span>}
      {copyButton(it.text, "Copy your message")}
      {children}
    </div>
  );
}

/** EditLast is the last message's Edit: the edited text goes as a new message. */
function EditLast({ it, s }: { it: UserItem; s: Session }) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState(it.text);
  const send = () => {
    if (!draft.trim()) return;
    setEditing(false);
    s.resendEdited(draft);
  };
  return editing ? (
        <div class="edit-box">
          <textarea aria-label="Edit your message" data-testid="edit-input" rows={3} value={draft}
            ref={(el) => el?.focus()}
            onInput={(e) => setDraft((e.target as HTMLTextAreaElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
                e.preventDefault();
                send();
              } else if (e.key === "Escape") {
                e.preventDefault();
                e.stopPropagation();
                setEditing(false);
              }
            }} />
          <div class="msg-actions">
            <button class="act" data-testid="edit-send" onClick={send} disabled={!draft.trim()}>Send edited</button>
            <button class="act" onClick={() => setEditing(false)}>Cancel</button>
          </div>
        </div>
      ) : (
        <UserActions it={it}>
          <button class="act" data-testid="edit" onClick={() => { setDraft(it.text); setEditing(true); }}>
            Edit
          </button>
        </UserActions>
      );
}

function Text({ it }: { it: TextItem; v: number }) {
  const text = it.text;
  // Streaming re-renders at most once a frame, however fast deltas come,
  // and less often when rendering the Markdown takes long (a long reply):
  // it waits four times what the last render took, so rendering never
  // takes more than a fifth of the main thread.
  const [shown, setShown] = useState(text);
  const cost = useRef(0);
  const latest = useRef(text);
  latest.current = text;
  // One render is scheduled at a time and takes the newest text when it
  // runs: a new delta does not push it back, so fast deltas cannot starve it.
  const timer = useRef<{ t: number; f: number } | null>(null);
  useEffect(() => {
    if (shown === text || timer.current) return;
    const tm = { t: 0, f: 0 };
    timer.current = tm;
    tm.t = window.setTimeout(() => {
      tm.f = requestAnimationFrame(() => {
        timer.current = null;
        setShown(latest.current);
      });
    }, Math.max(0, cost.current * 4 - 16));
  }, [text, shown]);
  useEffect(() => () => {
    if (timer.current) {
      clearTimeout(timer.current.t);
      cancelAnimationFrame(timer.current.f);
    }
  }, []);
  const html = useMemo(() => {
    const t0 = performance.now();
    const out = renderMarkdown(it.final ? text : shown);
    cost.current = performance.now() - t0;
    return out;
  }, [it.final ? text : shown]);
  const mdRef = useRef<HTMLDivElement>(null);
  useLayoutEffect(() => {
    if (mdRef.current) addCodeCopy(mdRef.current);
  }, [html]);
  return (
    <div class="msg-wrap assistant">
      <div class={"msg assistant" + (it.final ? "" : " streaming")} data-seq={it.seq} data-seqs={seqs(it)} data-parent={it.parent} data-kind="text" data-final={it.final ? "1" : "0"}>
        <div class="md" ref={mdRef} onClick={onCodeCopyClick} dangerouslySetInnerHTML={{ __html: html }} />
      </div>
      {it.final && !it.parent && (
        <div class="msg-actions">
          {copyButton(it.text, "Copy Mara's reply")}
        </div>
      )}
    </div>
  );
}

/** seqs lists the events an item shows, for tests that compare the page
 * with the server's log event by event. */
function seqs(it: Item): string {
  return it.seqs.join(" ");
}

function summary(it: ToolItem): string {
  const i = it.input ?? {};
  const s = i.command ?? i.file_path ?? i.path ?? i.pattern ?? i.title ?? i.description ?? i.url;
  if (typeof s === "string") return s.split("\n")[0];
  const j = JSON.stringify(i);
  return j === "{}" ? "" : j;
}

// One clock for every running card's elapsed time, ticking only while one shows.
const now = signal(Date.now());
let tickers = 0;
let ticker: number | undefined;
function Elapsed({ since }: { since: number }) {
  useEffect(() => {
    if (tickers++ === 0) ticker = window.setInterval(() => (now.value = Date.now()), 1000);
    return () => {
      if (--tickers === 0) clearInterval(ticker);
    };
  }, []);
  const secs = Math.max(0, Math.floor((now.value - since) / 1000));
  return (
    <span class="elapsed" data-testid="tool-elapsed" data-seconds={secs}>
      {secs < 60 ? secs + " s" : Math.floor(secs / 60) + " min " + (secs % 60) + " s"}
    </span>
  );
}

function fmtMs(ms: number): string {
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

function Tool({ it, v }: { it: ToolItem; v: number }) {
  const [all, setAll] = useState(false);
  const isEdit = it.name === "Edit" || it.name === "Write";
  const nested = it.children.length > 0;
  // A Task call's output repeats its sub-agent's work as text, for clients
  // that do not nest; with the work nested below it, only the report counts.
  const out = nested && !it.done ? "" : it.output;
  const capped = !all && out.length > OUTPUT_CAP;
  const state = !it.done ? "running" : it.isError ? "error" : "ok";
  // Open while it runs and after, collapsed when it came finished from
  // history, unless this tab saw it open (toolstate.ts); after that the
  // user decides.
  const conv = useContext(SessionCtx)?.id ?? "";
  const [initOpen] = useState(() => rememberedOpen(conv, it.id) ?? (!it.done || isEdit || it.isError));
  return (
    <details class={"tool tool-" + state} open={initOpen} onToggle={(e) => rememberOpen(conv, it.id, (e.currentTarget as HTMLDetailsElement).open)}
      data-seq={it.seq} data-seqs={seqs(it)} data-parent={it.parent} data-kind="tool" data-tool={it.name} data-state={state}>
      <summary>
        <span class="tool-name" title={it.name} data-testid="tool-name">{toolLabel(it.name)}</span>
        <code class="tool-summary" data-testid="tool-summary">{summary(it)}</code>
        {!it.done ? (
          <>
            {it.startedAt && <Elapsed since={it.startedAt} />}
            <span class="spinner" aria-label="running" />
          </>
        ) : (
          <span class="duration" data-testid="tool-duration">
            {it.isError ? "failed · " : ""}
            {it.durationMs != null ? fmtMs(it.durationMs) : ""}
          </span>
        )}
      </summary>
      {isEdit && <EditDiff it={it} v={v} />}
      {nested && <SubAgent it={it} v={v} />}
      {out && (
        <pre class="tool-output" data-testid="tool-output">
          {capped ? "…" + out.slice(out.length - OUTPUT_CAP) : out}
        </pre>
      )}
      {capped && (
        <button class="show-all" onClick={() => setAll(true)}>
          show all ({out.length.toLocaleString()} characters)
        </button>
      )}
      {it.truncated && <p class="meta">The output was cut before it reached the model.</p>}
      {it.done && <SpilledOutput output={out} />}
    </details>
  );
}

/** SpilledOutput opens the whole output a tool kept when it cut what the model saw. */
function SpilledOutput({ output }: { output: string }) {
  const conv = useContext(SessionCtx)?.id;
  const name = useMemo(() => spilledOutput(output), [output]);
  if (!name || !conv) return null;
  return (
    <button class="act spilled" data-testid="open-spilled" data-name={name} onClick={() => openViewer({ conv, kind: "output", target: name })}>
      Open the full output
    </button>
  );
}

// SubAgent shows a Task call's sub-agent work: its text and tool cards,
// each re-rendering on its own as the top-level ones do; open while it
// runs, then folded to one line. It takes the card's version: with hook
// state and the same item, @preact/signals would skip it, and a child that
// came after it opened would never show.
function SubAgent({ it }: { it: ToolItem; v: number }) {
  const [open, setOpen] = useState(!it.done);
  const tools = it.children.filter((c) => c.type === "tool").length;
  return (
    <details class="subagent" data-testid="subagent" open={open} onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}>
      <summary>
        sub-agent · {tools} tool call{tools === 1 ? "" : "s"}
      </summary>
      <div class="subagent-items">
        {it.children.map((c) => (
          <ItemView key={c.key} it={c} />
        ))}
      </div>
    </details>
  );
}

function EditDiff({ it }: { it: ToolItem; v?: number }) {
  const i = it.input ?? {};
  const before = it.name === "Edit" ? String(i.old_string ?? "") : "";
  const after = it.name === "Edit" ? String(i.new_string ?? "") : String(i.content ?? "");
  const parts = useMemo(() => diffLines(before, after), [before, after]);
  return (
    <div class="diff" data-testid="diff" aria-label={"Changes to " + (i.file_path ?? "the file")}>
      <div class="diff-path">{String(i.file_path ?? "")}</div>
      <pre>
        {parts.map((p, n) => {
          const cls = p.added ? "add" : p.removed ? "del" : "ctx";
          const sign = p.added ? "+" : p.removed ? "-" : " ";
          const lines = p.value.replace(/\n$/, "").split("\n");
          return lines.map((l, k) => (
            <span key={n + ":" + k} class={"line " + cls}>
              {sign + " " + l + "\n"}
            </span>
          ));
        })}
      </pre>
    </div>
  );
}

const hints: Record<string, string> = {
  interrupted: "You stopped this turn. Send a message to go on.",
  worker_restarted: "The worker restarted during the turn. Send the message again to continue.",
  rate_limited: "The model API is rate limiting. Wait a moment and send again.",
  overloaded: "The model API is overloaded. Try again in a minute.",
  budget_exhausted: "A budget limit stopped this turn; see when it frees up above, or ask the operator to raise it.",
  model_error: "The model API failed. Send again; if it keeps failing, tell the operator.",
  gateway_auth: "The gateway refused the worker: tell the operator.",
  max_turns: "The turn reached its model-call limit. Send a message to let Mara go on.",
  internal: "Something broke on our side. Send again; if it keeps failing, tell the operator.",
};

/** TurnCost is the turn's cost as the control-plane's ledger has it, once known. */
function TurnCost({ turnId }: { turnId?: string }) {
  const u = turnId ? turnCosts.value.get(turnId) : undefined;
  if (!u) return null;
  return (
    <span class="cost" data-testid="cost" data-usd={u.cost_usd} title={`${u.calls} model call${u.calls === 1 ? "" : "s"} charged${u.estimated ? " (partly estimated)" : ""}${u.title_cost_usd ? `, and ${fmtUSD(u.title_cost_usd)} for naming the conversation` : ""}`}
      data-title-usd={u.title_cost_usd}>
      {fmtUSD(u.cost_usd)}
      {u.title_cost_usd && (
        <span class="title-cost" data-testid="title-cost">
          {" "}(incl. {fmtUSD(u.title_cost_usd)} to name the conversation)
        </span>
      )}
    </span>
  );
}

function Footer({ it }: { it: FooterItem; v: number }) {
  const s = useContext(SessionCtx);
  const f = it.failure;
  // Retry resends the failed turn's message, when the worker says the
  // failure may pass (and the user did not stop it), that turn is the last
  // and nothing runs (a new message would otherwise be the better answer).
  const t = s?.t.value;
  const retry = !!f && f.retryable && f.code !== "interrupted" && !!t && t.lastFooter.value === it && !t.running.value ? userTextOf(t, it.turnId) : null;
  const tokens = `${it.inputTokens.toLocaleString()} in · ${it.outputTokens.toLocaleString()} out` + (it.cacheTokens ? ` · ${it.cacheTokens.toLocaleString()} cache` : "");
  return (
    <div class={"turn-footer" + (f ? " failed" : "")} data-seq={it.seq} data-seqs={seqs(it)} data-kind={f ? "turn.failed" : "turn.finished"} data-code={f?.code}>
      {f ? (
        <>
          <strong class="code" title={f.code}>{failureTitle(f.code)}</strong> <span>{f.message}</span>
          <div class="hint">
            {hints[f.code] ?? (f.retryable ? "Send again to retry." : "")}
            {retry !== null && (
              <button class="act retry" data-testid="retry" onClick={() => s!.submit(retry)}>
                Retry
              </button>
            )}
          </div>
        </>
      ) : (
        <span title={it.finish?.stop_reason}>
          {stopReason(it.finish?.stop_reason)} · {it.calls} model call{it.calls === 1 ? "" : "s"} · {fmtMs(it.finish?.duration_ms ?? 0)}
        </span>
      )}
      <span class="tokens" data-testid="tokens">{tokens} tokens</span>
      <TurnCost turnId={it.turnId} />
    </div>
  );
}
