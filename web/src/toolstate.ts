// Whether a tool card was open, per tool call id, for this tab: a card seen
// open while it ran (or opened by the user) is open again after a reload,
// and one the user closed stays closed. sessionStorage, like the outbox:
// it lives as long as the tab. The conversation is part of the key: the
// simulator (and a model replaying a conversation) can give two
// conversations' calls the same id.
const key = (conv: string, id: string) => "talkide.tool-open." + conv + "." + id;

export function rememberedOpen(conv: string, id: string): boolean | undefined {
  try {
    const v = sessionStorage.getItem(key(conv, id));
    return v === null ? undefined : v === "1";
  } catch {
    return undefined;
  }
}

export function rememberOpen(conv: string, id: string, open: boolean) {
  try {
    sessionStorage.setItem(key(conv, id), open ? "1" : "0");
  } catch {
    /* storage full or off: the card forgets, as before */
  }
}
