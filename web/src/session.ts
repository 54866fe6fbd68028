// One open conversation: its history, its live stream, its outbox, and
// sending and interrupting.
import { signal, batch } from "@preact/signals";
import { api, ApiError, type Event, type Issue } from "./api";
import { Transcript, rebuild, EDITED_PREFIX } from "./transcript";
import { Outbox } from "./outbox";
import { openStream, type ConnState } from "./stream";
import { addCosts, fetchTurnCost } from "./costs";

/** turnEdge tells the rest of the page (the list's running marks, the budget) that a turn started or ended here. */
function turnEdge(id: string, kind: string) {
  window.dispatchEvent(new CustomEvent("talkide:turn", { detail: { id, kind } }));
}

/** How many (compacted) events a history page holds. */
export const PAGE = 200;

export class Session {
  readonly t = signal(new Transcript());
  readonly outbox: Outbox;
  readonly conn = signal<ConnState>("connecting");
  readonly stopping = signal(false);
  readonly hasMore = signal(false);
  readonly loadingOlder = signal(false);
  readonly error = signal<string | null>(null);
  readonly issues = signal<Issue[]>([]);
  readonly ready = signal(false);
  /** Counts the messages this page sent: each brings the transcript back to its end. */
  readonly sent = signal(0);
  private firstSeq = 0;
  private closeStream: (() => void) | null = null;
  private sending = false;
  /** Posted by this page (a reload forgets, and resends once: harmless). */
  private posted = new Set<string>();
  private closed = false;
  private retryTimer: number | undefined;

  constructor(readonly id: string) {
    this.outbox = new Outbox(id);
  }

  async open() {
    try {
      const [page, conv] = await Promise.all([api.history(this.id, null, PAGE), api.get(this.id)]);
      if (this.closed) return;
      const t = this.t.value;
      t.apply(page.events);
      addCosts(page.turn_usage);
      this.firstSeq = page.first_seq;
      this.hasMore.value = page.has_more;
      if (conv.state?.status === "running" && conv.state.running_turn_id) {
        const ended = t.events.some((e) => e.turn_id === conv.state!.running_turn_id && (e.kind === "turn.finished" || e.kind === "turn.failed"));
        if (!ended) t.running.value = conv.state.running_turn_id;
      }
      this.outbox.drop(t.seenMessages);
      this.ready.value = true;
    } catch (e) {
      this.error.value = e instanceof ApiError ? e.message : String(e);
      if (e instanceof ApiError && e.status === 404) return;
      this.ready.value = true;
    }
    this.closeStream = openStream({
      conversationId: this.id,
      after: () => this.t.value.lastSeq.value,
      onEvent: (ev) => this.onEvent(ev),
      onState: (s) => {
        this.conn.value = s;
        if (s === "live") this.error.value = null;
      },
    });
    this.loadIssues();
    this.pump();
  }

  close() {
    this.closed = true;
    this.closeStream?.();
    clearTimeout(this.retryTimer);
  }

  private onEvent(ev: Event) {
    const t = this.t.value;
    if (!t.apply([ev])) return;
    if (ev.kind === "user.message") this.outbox.drop(t.seenMessages);
    if (ev.kind === "turn.finished" || ev.kind === "turn.failed") {
      this.stopping.value = false;
      this.pump();
      if (ev.turn_id) fetchTurnCost(this.id, ev.turn_id, ev.finish?.model_calls);
    }
    if (ev.kind === "turn.started" || ev.kind === "turn.finished" || ev.kind === "turn.failed") turnEdge(this.id, ev.kind);
    if (ev.kind === "tool.finished" && ev.tool?.name.startsWith("mcp__talkide-issue-tracking__")) this.loadIssues();
  }

  async loadIssues() {
    try {
      this.issues.value = (await api.issues(this.id)).issues;
    } catch {
      /* shown as before; retried at the next issue tool call */
    }
  }

  /** loadOlder puts the page before the first loaded event in front. */
  async loadOlder(): Promise<boolean> {
    if (!this.hasMore.value || this.loadingOlder.value) return false;
    this.loadingOlder.value = true;
    try {
      const page = await api.history(this.id, this.firstSeq, PAGE);
      batch(() => {
        this.firstSeq = page.first_seq || this.firstSeq;
        this.hasMore.value = page.has_more;
        addCosts(page.turn_usage);
        this.t.value = rebuild(page.events, this.t.value);
      });
      return true;
    } catch (e) {
      this.error.value = e instanceof ApiError ? e.message : String(e);
      return false;
    } finally {
      this.loadingOlder.value = false;
    }
  }

  /** submit queues text; pump sends it when no turn runs. */
  submit(text: string, attachments?: string[]) {
    if (!text.trim()) return;
    this.outbox.add(text, undefined, attachments);
    this.sent.value++;
    this.pump();
  }

  /** resendEdited sends text as a new message that replaces the last one in
   * the page's eyes; the log is append-only, so the earlier message and
   * its turn stay, marked as superseded (docs/webui.md). */
  resendEdited(text: string) {
    if (!text.trim()) return;
    this.outbox.add(text, EDITED_PREFIX);
    this.sent.value++;
    this.pump();
  }

  /** pump sends the first pending message when nothing stands in the way. */
  async pump() {
    if (this.closed || this.sending || !this.ready.value) return;
    const t = this.t.value;
    this.outbox.drop(t.seenMessages);
    const items = this.outbox.items.value;
    if (!items.length) return;
    const first = items[0];
    // One turn at a time: a message posted but not yet in the log, or a
    // running turn, holds the queue.
    if (t.running.value && first.state === "queued") return;
    if (this.posted.has(first.cmid)) return;
    this.sending = true;
    this.outbox.update(first.cmid, { state: "sending" });
    try {
      await api.send(this.id, first.text, first.cmid, first.attachments);
      // The list moves this conversation to the top at once.
      window.dispatchEvent(new CustomEvent("talkide:sent", { detail: { conversation: this.id } }));
      this.posted.add(first.cmid);
      this.error.value = null;
    } catch (e) {
      const err = e as ApiError;
      if (err.status === 409 && err.code === "turn_running") {
        // Another tab or a turn this page has not seen yet: wait for its end.
        this.outbox.update(first.cmid, { state: "queued" });
      } else if (err.status === 503 && err.code === "worker_busy") {
        // The worker runs its most turns at once and recorded nothing:
        // say so, and send again (same id) when it said to.
        this.error.value = err.message;
        this.retryTimer = window.setTimeout(() => this.pump(), Math.max(err.retryAfter, 1) * 1000);
      } else if (err.status === 0 || err.status >= 500) {
        // Unreachable: try again with the same id, which never starts a
        // second turn.
        this.retryTimer = window.setTimeout(() => this.pump(), 1000);
      } else {
        // Refused for good (too long, bad text): back to the queue for
        // the user to edit, with the reason.
        this.outbox.update(first.cmid, { state: "queued" });
        this.error.value = err.message;
        this.sending = false;
        return;
      }
    } finally {
      this.sending = false;
    }
    if (this.outbox.items.value.some((p) => p.state === "sending")) return;
    this.pump();
  }

  async interrupt() {
    if (!this.t.value.running.value || this.stopping.value) return;
    this.stopping.value = true;
    try {
      const r = await api.interrupt(this.id);
      if (!r.interrupted) this.stopping.value = false;
    } catch (e) {
      this.error.value = (e as ApiError).message;
      this.stopping.value = false;
    }
  }
}
