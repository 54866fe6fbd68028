// A conversation's event stream: SSE read over fetch (not EventSource), so
// that every reconnect sends Last-Event-ID with the last sequence number the
// page applied, backs off on our terms, and reports its state to the header.
import type { Event } from "./api";
import { api } from "./api";

export type ConnState = "connecting" | "live" | "reconnecting" | "offline";

export interface StreamOptions {
  conversationId: string;
  /** The last sequence number already applied; the stream resumes after it. */
  after: () => number;
  onEvent: (ev: Event) => void;
  onState: (s: ConnState) => void;
}

/** openStream follows the stream until the returned function is called. */
export function openStream(o: StreamOptions): () => void {
  const ctl = new AbortController();
  let attempt = 0;
  const run = async () => {
    while (!ctl.signal.aborted) {
      try {
        const after = o.after();
        const resp = await fetch(api.streamURL(o.conversationId, after), {
          headers: { "Last-Event-ID": String(after), Accept: "text/event-stream" },
          signal: ctl.signal,
          cache: "no-store",
        });
        if (!resp.ok || !resp.body) throw new Error("stream: HTTP " + resp.status);
        o.onState("live");
        attempt = 0;
        await readSSE(resp.body, (id, data) => {
          attempt = 0;
          if (!data) return;
          let ev: Event;
          try {
            ev = JSON.parse(data);
          } catch {
            return;
          }
          if (id && Number(id) !== ev.seq) return; // not an event of the log
          o.onEvent(ev);
        });
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      if (ctl.signal.aborted) return;
      o.onState(navigator.onLine === false ? "offline" : "reconnecting");
      // 250 ms doubling to 5 s, with jitter; a stream that delivered
      // something starts over at the shortest pause.
      const pause = Math.min(5000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2);
      attempt = Math.min(attempt + 1, 6);
      await sleep(pause, ctl.signal);
    }
  };
  o.onState("connecting");
  run();
  return () => ctl.abort();
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
    // Coming back online is worth an immediate try.
    window.addEventListener("online", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}

/** readSSE parses a text/event-stream body and calls onMessage per event. */
async function readSSE(body: ReadableStream<Uint8Array<ArrayBuffer>>, onMessage: (id: string, data: string) => void) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let id = "";
  let data: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let nl: number;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf[nl] === "\r" && buf[nl + 1] === "\n" ? 2 : 1));
      if (line === "") {
        if (data.length) onMessage(id, data.join("\n"));
        id = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "data") data.push(val);
      else if (field === "id") id = val;
    }
  }
}
