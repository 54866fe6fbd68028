import { useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { Component } from "preact";
import { diffLines } from "diff";
import type { Session } from "./session";
import type { Item, ToolItem, TextItem, FooterItem, UserItem, NoticeItem, Transcript } from "./transcript";
import { render as renderMarkdown } from "./markdown";
import { turnCosts, fmtUSD } from "./costs";

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
  const [stuck, setStuck] = useState(true);
  const stuckRef = useRef(true);
  stuckRef.current = stuck;
  const anchor = useRef<{ height: number; top: number } | null>(null);
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

  // Auto-scroll: while the user is at the bottom, growth keeps them there;
  // once they scroll up it lets go until "jump to latest".
  useEffect(() => {
    const el = scroller.current!, content = inner.current!;
    const ro = new ResizeObserver(() => {
      if (anchor.current) {
        // An older page went in front: keep what the user looked at.
        el.scrollTop = anchor.current.top + (el.scrollHeight - anchor.current.height);
        anchor.current = null;
      } else if (stuckRef.current) el.scrollTop = el.scrollHeight;
    });
    ro.observe(content);
    return () => ro.disconnect();
  }, [s]);

  const onScroll = () => {
    const el = scroller.current!;
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 48;
    if (atBottom !== stuckRef.current) setStuck(atBottom);
    if (el.scrollTop < 300 && s.hasMore.value && !s.loadingOlder.value) {
      anchor.current = { height: el.scrollHeight, top: el.scrollTop };
      s.loadOlder().then((ok) => {
        if (!ok) anchor.current = null;
      });
    }
  };

  return (
    <div class="transcript-wrap">
      <div class="transcript" ref={scroller} onScroll={onScroll} data-testid="transcript" aria-label="Transcript" role="log" tabIndex={0}>
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
                <div class="body">{p.text}</div>
                <div class="meta">sending…</div>
              </div>
            ))}
        </div>
      </div>
      {!stuck && (
        <button
          class="jump"
          data-testid="jump"
          onClick={() => {
            const el = scroller.current!;
            el.scrollTop = el.scrollHeight;
            setStuck(true);
          }}
        >
          ↓ Jump to latest
        </button>
      )}
    </div>
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
  return (
    <div class="notice" data-seq={it.seq} data-seqs={seqs(it)} data-kind="notice">
      {it.text}
    </div>
  );
}

function User({ it }: { it: UserItem; v: number }) {
  return (
    <div class="msg user" data-seq={it.seq} data-seqs={seqs(it)} data-kind="user.message" data-cmid={it.clientMessageId}>
      <div class="body">{it.text}</div>
    </div>
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
  return (
    <div class={"msg assistant" + (it.final ? "" : " streaming")} data-seq={it.seq} data-seqs={seqs(it)} data-parent={it.parent} data-kind="text" data-final={it.final ? "1" : "0"}>
      <div class="md" dangerouslySetInnerHTML={{ __html: html }} />
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
  // history; after that the user decides.
  const [initOpen] = useState(!it.done || isEdit || it.isError);
  return (
    <details class={"tool tool-" + state} open={initOpen} data-seq={it.seq} data-seqs={seqs(it)} data-parent={it.parent} data-kind="tool" data-tool={it.name} data-state={state}>
      <summary>
        <span class="tool-name">{it.name}</span>
        <code class="tool-summary" data-testid="tool-summary">{summary(it)}</code>
        {!it.done ? (
          <span class="spinner" aria-label="running" />
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
    </details>
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
    <span class="cost" data-testid="cost" data-usd={u.cost_usd} title={`${u.calls} model call${u.calls === 1 ? "" : "s"} charged${u.estimated ? " (partly estimated)" : ""}`}>
      {fmtUSD(u.cost_usd)}
    </span>
  );
}

function Footer({ it }: { it: FooterItem; v: number }) {
  const f = it.failure;
  const tokens = `${it.inputTokens.toLocaleString()} in · ${it.outputTokens.toLocaleString()} out` + (it.cacheTokens ? ` · ${it.cacheTokens.toLocaleString()} cache` : "");
  return (
    <div class={"turn-footer" + (f ? " failed" : "")} data-seq={it.seq} data-seqs={seqs(it)} data-kind={f ? "turn.failed" : "turn.finished"} data-code={f?.code}>
      {f ? (
        <>
          <strong class="code">{f.code}</strong> <span>{f.message}</span>
          <div class="hint">{hints[f.code] ?? (f.retryable ? "Send again to retry." : "")}</div>
        </>
      ) : (
        <span>
          {it.finish?.stop_reason} · {it.calls} model call{it.calls === 1 ? "" : "s"} · {fmtMs(it.finish?.duration_ms ?? 0)}
        </span>
      )}
      <span class="tokens" data-testid="tokens">{tokens} tokens</span>
      <TurnCost turnId={it.turnId} />
    </div>
  );
}
