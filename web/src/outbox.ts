// Messages the user wrote that the log does not hold yet, kept in
// sessionStorage so that a reload resends them with the same
// client_message_id (the worker starts a turn once per id) and a queued
// message survives the reload too.
import { signal } from "@preact/signals";
import { newID } from "./api";

export interface Pending {
  cmid: string;
  text: string;
  /** workspace paths of the files the text names as attached */
  attachments?: string[];
  /** queued: waits for the running turn; sending: posted, not yet in the log. */
  state: "queued" | "sending";
}

export class Outbox {
  readonly items = signal<Pending[]>([]);
  constructor(private conversationId: string) {
    try {
      const raw = sessionStorage.getItem(this.key());
      if (raw) this.items.value = JSON.parse(raw);
    } catch {
      /* a broken entry is dropped */
    }
  }
  private key() {
    return "talkide.outbox." + this.conversationId;
  }
  private save(next: Pending[]) {
    this.items.value = next;
    try {
      if (next.length) sessionStorage.setItem(this.key(), JSON.stringify(next));
      else sessionStorage.removeItem(this.key());
    } catch {
      /* storage full or off: the queue lives in memory only */
    }
  }
  add(text: string, prefix = "m_", attachments?: string[]) {
    this.save([...this.items.value, { cmid: newID(prefix), text, state: "queued", ...(attachments?.length ? { attachments } : {}) }]);
  }
  update(cmid: string, patch: Partial<Pending>) {
    this.save(this.items.value.map((p) => (p.cmid === cmid ? { ...p, ...patch } : p)));
  }
  remove(cmid: string) {
    this.save(this.items.value.filter((p) => p.cmid !== cmid));
  }
  /** drop removes what the log already holds. */
  drop(seen: Set<string>) {
    const next = this.items.value.filter((p) => !seen.has(p.cmid));
    if (next.length !== this.items.value.length) this.save(next);
  }
}
