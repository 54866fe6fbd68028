// The transcript: events folded into what the page shows. Each event is
// applied at most once, by sequence number, so a replayed or resumed stream
// never doubles a word; items are mutable objects with a version signal, so
// a streaming delta re-renders its own block, not the whole conversation.
import { signal, type Signal } from "@preact/signals";
import type { Event, Failure, Finish } from "./api";

interface Base {
  key: string;
  seq: number;
  turnId?: string;
  /** The Task call whose sub-agent produced the item, if any. */
  parent?: string;
  /** Every event folded into the item, in order (data-seqs in the DOM). */
  seqs: number[];
  v: Signal<number>;
}

/** repeat: the same notice again (every worker start says it): shown once. */
export interface NoticeItem extends Base { type: "notice"; text: string; repeat?: boolean }
/** edited: sent by "edit and resend"; superseded: the message an edited one replaced. */
export interface UserItem extends Base { type: "user"; text: string; clientMessageId?: string; edited?: boolean; superseded?: boolean }
export interface TextItem extends Base { type: "text"; text: string; final: boolean }
export interface ToolItem extends Base {
  type: "tool";
  id: string;
  name: string;
  input: any;
  output: string;
  done: boolean;
  isError: boolean;
  truncated: boolean;
  durationMs?: number;
  /** When the call started, by the worker's clock (ms since the epoch). */
  startedAt?: number;
  /** A Task call's sub-agent work, nested under it. */
  children: Item[];
}
export interface FooterItem extends Base {
  type: "footer";
  finish?: Finish;
  failure?: Failure;
  inputTokens: number;
  outputTokens: number;
  cacheTokens: number;
  calls: number;
}
export type Item = NoticeItem | UserItem | TextItem | ToolItem | FooterItem;

export interface FileChange { path: string; tool: string; toolKey: string; seq: number }

export class Transcript {
  readonly items = signal<Item[]>([]);
  /** The turn running now, if any, per the events applied. */
  readonly running = signal<string | null>(null);
  readonly lastSeq = signal(0);
  readonly changes = signal<FileChange[]>([]);
  /** The last top-level user message and turn footer: they get Edit and Retry. */
  readonly lastUser = signal<UserItem | null>(null);
  readonly lastFooter = signal<FooterItem | null>(null);
  /** client_message_ids the log holds: never sent again. */
  readonly seenMessages = new Set<string>();
  /** Every event applied, in order; older pages are put in front. */
  events: Event[] = [];
  private seen = new Set<number>();
  private list: Item[] = [];
  /** Events no item shows (session.created, …): still in the DOM. */
  readonly loose = signal<number[]>([]);
  private openText = new Map<string, TextItem>(); // turn and agent → text block streaming
  private tools = new Map<string, ToolItem>();
  private notices = new Set<string>();
  private usage = new Map<string, { in: number; out: number; cache: number; calls: number }>();
  private batching = false;
  private changed = false;

  /** apply adds events in order; it reports whether any was new. */
  apply(evs: Event[]): boolean {
    let any = false;
    this.batching = true;
    for (const ev of evs) any = this.applyOne(ev) || any;
    this.batching = false;
    if (this.changed) this.flush();
    return any;
  }

  private flush() {
    this.changed = false;
    this.items.value = this.list.slice();
  }

  private push(it: Item) {
    const parent = it.parent ? this.tools.get(it.parent) : undefined;
    if (parent) {
      // A sub-agent's work goes under its Task call; the call re-renders.
      parent.children.push(it);
      this.touch(parent);
      return;
    }
    this.list.push(it);
    if (this.batching) this.changed = true;
    else this.flush();
  }

  /** fold records ev's seq on the item that shows it. */
  private fold(it: Item, seq: number) {
    it.seqs.push(seq);
  }

  /** attach puts an event no item shows on the last item of its agent's
   * part of the transcript, or on the transcript itself. */
  private attach(parent: string | undefined, seq: number) {
    const p = parent ? this.tools.get(parent) : undefined;
    const list = p ? p.children : this.list;
    const last = list[list.length - 1] ?? p;
    if (last) {
      this.fold(last, seq);
      this.touch(last);
    } else {
      this.loose.value = [...this.loose.value, seq];
    }
  }

  private touch(it: Item) {
    it.v.value++;
  }

  private applyOne(ev: Event): boolean {
    if (typeof ev.seq !== "number" || this.seen.has(ev.seq)) return false;
    this.seen.add(ev.seq);
    this.events.push(ev);
    if (ev.seq > this.lastSeq.value) this.lastSeq.value = ev.seq;
    const parent = ev.parent_tool_use_id || undefined;
    const base = (key: string) => ({ key, seq: ev.seq, turnId: ev.turn_id, parent, seqs: [ev.seq], v: signal(0) });
    const turn = ev.turn_id ?? "";
    // Each agent of a turn (the main one, each sub-agent) streams its own
    // text blocks.
    const agent = turn + "\u0000" + (parent ?? "");
    switch (ev.kind) {
      case "notice": {
        const text = ev.text ?? "";
        const repeat = this.notices.has(text);
        this.notices.add(text);
        this.push({ ...base("n" + ev.seq), type: "notice", text, repeat });
        break;
      }
      case "user.message": {
        const cmid = ev.client_message_id;
        if (cmid) this.seenMessages.add(cmid);
        const it: UserItem = { ...base("u" + ev.seq), type: "user", text: ev.text ?? "", clientMessageId: cmid };
        const prev = this.lastUser.peek();
        if (cmid && isEdited(cmid) && prev) {
          it.edited = true;
          prev.superseded = true;
          this.touch(prev);
        }
        this.push(it);
        if (!parent) this.lastUser.value = it;
        break;
      }
      case "turn.started":
        this.running.value = turn;
        this.attach(undefined, ev.seq);
        break;
      case "text.delta": {
        let t = this.openText.get(agent);
        if (!t) {
          t = { ...base("t" + ev.seq), type: "text", text: "", final: false };
          this.openText.set(agent, t);
          this.push(t);
        } else this.fold(t, ev.seq);
        t.text += ev.text ?? "";
        this.touch(t);
        break;
      }
      case "assistant.message": {
        // The complete reply replaces what its deltas built up (a history
        // page folds the deltas away and sends only this).
        const t = this.openText.get(agent);
        this.openText.delete(agent);
        if (t) {
          t.text = ev.text ?? t.text;
          t.final = true;
          this.fold(t, ev.seq);
          this.touch(t);
        } else if (ev.text) {
          this.push({ ...base("t" + ev.seq), type: "text", text: ev.text, final: true });
        } else this.attach(parent, ev.seq);
        break;
      }
      case "tool.started": {
        const tool = ev.tool!;
        this.openText.delete(agent);
        const it: ToolItem = {
          ...base("k" + ev.seq), type: "tool", id: tool.id, name: tool.name, input: tool.input ?? {},
          output: "", done: false, isError: false, truncated: false, children: [],
          startedAt: Date.parse(ev.time) || undefined,
        };
        this.tools.set(tool.id, it);
        this.push(it);
        const path = it.input?.file_path;
        if ((tool.name === "Edit" || tool.name === "Write") && typeof path === "string") {
          this.changes.value = [...this.changes.value, { path, tool: tool.name, toolKey: it.key, seq: ev.seq }];
        }
        break;
      }
      case "tool.output": {
        const it = this.tools.get(ev.tool?.id ?? "");
        if (it) {
          if (!it.done) it.output += ev.tool?.output ?? "";
          this.fold(it, ev.seq);
          this.touch(it);
        } else this.attach(parent, ev.seq);
        break;
      }
      case "tool.finished": {
        const tool = ev.tool!;
        let it = this.tools.get(tool.id);
        if (!it) {
          it = {
            ...base("k" + ev.seq), type: "tool", id: tool.id, name: tool.name, input: {},
            output: "", done: false, isError: false, truncated: false, children: [],
          };
          this.tools.set(tool.id, it);
          this.push(it);
        } else this.fold(it, ev.seq);
        it.done = true;
        it.output = tool.output ?? it.output;
        it.isError = !!tool.is_error;
        it.truncated = !!tool.truncated;
        it.durationMs = tool.duration_ms ?? 0;
        this.touch(it);
        break;
      }
      case "usage": {
        const u = this.usage.get(turn) ?? { in: 0, out: 0, cache: 0, calls: 0 };
        const x = ev.usage!;
        u.in += x.input_tokens ?? 0;
        u.out += x.output_tokens ?? 0;
        u.cache += (x.cache_creation_input_tokens ?? 0) + (x.cache_read_input_tokens ?? 0);
        u.calls++;
        this.usage.set(turn, u);
        this.attach(parent, ev.seq);
        break;
      }
      case "turn.finished":
      case "turn.failed": {
        for (const k of [...this.openText.keys()]) if (k.startsWith(turn + "\u0000")) this.openText.delete(k);
        for (const it of this.tools.values()) {
          if (it.turnId === turn && !it.done) {
            it.done = true;
            it.isError = ev.kind === "turn.failed";
            this.touch(it);
          }
        }
        const u = this.usage.get(turn) ?? { in: 0, out: 0, cache: 0, calls: 0 };
        const f: FooterItem = {
          ...base("f" + ev.seq), type: "footer", finish: ev.finish, failure: ev.failure,
          inputTokens: u.in, outputTokens: u.out, cacheTokens: u.cache, calls: ev.finish?.model_calls ?? u.calls,
        };
        this.push(f);
        this.lastFooter.value = f;
        if (this.running.value === turn || this.running.value === null) this.running.value = null;
        break;
      }
      default:
        this.attach(undefined, ev.seq);
    }
    return true;
  }
}

/** EDITED_PREFIX starts the client_message_id of a message sent by "edit
 * and resend": the log keeps that mark, so every page (and a reload) shows
 * the earlier message as superseded without a record of its own. */
export const EDITED_PREFIX = "e_";
export function isEdited(cmid: string): boolean {
  return cmid.startsWith(EDITED_PREFIX);
}

/** userTextOf is the user message that started a turn. */
export function userTextOf(t: Transcript, turnId: string | undefined): string | null {
  if (!turnId) return null;
  for (const it of t.items.peek()) if (it.type === "user" && it.turnId === turnId) return it.text;
  return null;
}

/** rebuild makes a transcript from older events followed by those of t. */
export function rebuild(older: Event[], t: Transcript): Transcript {
  const n = new Transcript();
  n.apply([...older, ...t.events].sort((a, b) => a.seq - b.seq));
  return n;
}
