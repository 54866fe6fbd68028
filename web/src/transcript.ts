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
  v: Signal<number>;
}

export interface NoticeItem extends Base { type: "notice"; text: string }
export interface UserItem extends Base { type: "user"; text: string; clientMessageId?: string }
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
  /** client_message_ids the log holds: never sent again. */
  readonly seenMessages = new Set<string>();
  /** Every event applied, in order; older pages are put in front. */
  events: Event[] = [];
  private seen = new Set<number>();
  private list: Item[] = [];
  private openText = new Map<string, TextItem>(); // turn → text block streaming
  private tools = new Map<string, ToolItem>();
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
    this.list.push(it);
    if (this.batching) this.changed = true;
    else this.flush();
  }

  private touch(it: Item) {
    it.v.value++;
  }

  private applyOne(ev: Event): boolean {
    if (typeof ev.seq !== "number" || this.seen.has(ev.seq)) return false;
    this.seen.add(ev.seq);
    this.events.push(ev);
    if (ev.seq > this.lastSeq.value) this.lastSeq.value = ev.seq;
    const base = (key: string) => ({ key, seq: ev.seq, turnId: ev.turn_id, v: signal(0) });
    const turn = ev.turn_id ?? "";
    switch (ev.kind) {
      case "notice":
        this.push({ ...base("n" + ev.seq), type: "notice", text: ev.text ?? "" });
        break;
      case "user.message":
        if (ev.client_message_id) this.seenMessages.add(ev.client_message_id);
        this.push({ ...base("u" + ev.seq), type: "user", text: ev.text ?? "", clientMessageId: ev.client_message_id });
        break;
      case "turn.started":
        this.running.value = turn;
        break;
      case "text.delta": {
        let t = this.openText.get(turn);
        if (!t) {
          t = { ...base("t" + ev.seq), type: "text", text: "", final: false };
          this.openText.set(turn, t);
          this.push(t);
        }
        t.text += ev.text ?? "";
        this.touch(t);
        break;
      }
      case "assistant.message": {
        // The complete reply replaces what its deltas built up (a history
        // page folds the deltas away and sends only this).
        const t = this.openText.get(turn);
        this.openText.delete(turn);
        if (t) {
          t.text = ev.text ?? t.text;
          t.final = true;
          this.touch(t);
        } else if (ev.text) {
          this.push({ ...base("t" + ev.seq), type: "text", text: ev.text, final: true });
        }
        break;
      }
      case "tool.started": {
        const tool = ev.tool!;
        this.openText.delete(turn);
        const it: ToolItem = {
          ...base("k" + ev.seq), type: "tool", id: tool.id, name: tool.name, input: tool.input ?? {},
          output: "", done: false, isError: false, truncated: false,
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
        if (it && !it.done) {
          it.output += ev.tool?.output ?? "";
          this.touch(it);
        }
        break;
      }
      case "tool.finished": {
        const tool = ev.tool!;
        let it = this.tools.get(tool.id);
        if (!it) {
          it = {
            ...base("k" + ev.seq), type: "tool", id: tool.id, name: tool.name, input: {},
            output: "", done: false, isError: false, truncated: false,
          };
          this.tools.set(tool.id, it);
          this.push(it);
        }
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
        break;
      }
      case "turn.finished":
      case "turn.failed": {
        this.openText.delete(turn);
        for (const it of this.tools.values()) {
          if (it.turnId === turn && !it.done) {
            it.done = true;
            it.isError = ev.kind === "turn.failed";
            this.touch(it);
          }
        }
        const u = this.usage.get(turn) ?? { in: 0, out: 0, cache: 0, calls: 0 };
        this.push({
          ...base("f" + ev.seq), type: "footer", finish: ev.finish, failure: ev.failure,
          inputTokens: u.in, outputTokens: u.out, cacheTokens: u.cache, calls: ev.finish?.model_calls ?? u.calls,
        });
        if (this.running.value === turn || this.running.value === null) this.running.value = null;
        break;
      }
    }
    return true;
  }
}

/** rebuild makes a transcript from older events followed by those of t. */
export function rebuild(older: Event[], t: Transcript): Transcript {
  const n = new Transcript();
  n.apply([...older, ...t.events].sort((a, b) => a.seq - b.seq));
  return n;
}
