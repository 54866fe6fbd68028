// Copying to the clipboard. The async Clipboard API needs a secure context
// and a focused page; where it refuses, a selected hidden textarea and
// execCommand still work in every browser we target.

export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch {
      /* reported below */
    }
    ta.remove();
    return ok;
  }
}

/** How long a button says "Copied": long enough to read, short enough to copy again. */
export const COPIED_MS = 1500;

/** addCodeCopy puts a Copy button on each code block of rendered Markdown.
 * The buttons are ours, added after sanitizing: the sanitizer's list of
 * tags never has to admit buttons from model output. */
export function addCodeCopy(root: HTMLElement) {
  for (const pre of root.querySelectorAll("pre")) {
    if (pre.parentElement?.classList.contains("code-block")) continue;
    const wrap = document.createElement("div");
    wrap.className = "code-block";
    const b = document.createElement("button");
    b.type = "button";
    b.className = "copy-code";
    b.setAttribute("data-testid", "copy-code");
    b.setAttribute("aria-label", "Copy code");
    b.textContent = "Copy";
    pre.replaceWith(wrap);
    wrap.append(b, pre);
  }
}

/** flashCopy copies text and has the button say so for a moment. The
 * button's label is set here, not by a component's state: a transcript
 * has hundreds of these, and a hook each made opening a long one slower. */
export function flashCopy(b: HTMLElement, text: string) {
  copyText(text).then((ok) => {
    b.textContent = ok ? "Copied" : "Copy failed";
    b.setAttribute("data-copied", ok ? "1" : "0");
    setTimeout(() => {
      b.textContent = "Copy";
      b.removeAttribute("data-copied");
    }, COPIED_MS);
  });
}

/** onCodeCopyClick handles a click on a code block's Copy button (delegated
 * from the message, so that a re-render's new buttons need no listener). */
export function onCodeCopyClick(e: MouseEvent) {
  const b = (e.target as Element | null)?.closest?.("button.copy-code") as HTMLButtonElement | null;
  if (!b) return;
  flashCopy(b, b.parentElement?.querySelector("pre")?.textContent ?? "");
}
