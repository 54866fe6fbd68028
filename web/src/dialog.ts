// Modal dialogs: Tab cycles inside them, and the page knows one is open, so
// that Esc closes the dialog instead of stopping the running turn.

const focusable = 'a[href], button:not([disabled]), input:not([disabled]), textarea:not([disabled]), select:not([disabled]), [tabindex]:not([tabindex="-1"])';

/** trapTab keeps Tab and Shift+Tab inside root; call it from root's keydown. */
export function trapTab(e: KeyboardEvent, root: HTMLElement | null) {
  if (e.key !== "Tab" || !root) return;
  const els = [...root.querySelectorAll<HTMLElement>(focusable)].filter((el) => el.offsetParent !== null || el === document.activeElement);
  if (els.length === 0) {
    e.preventDefault();
    return;
  }
  const first = els[0], last = els[els.length - 1];
  const at = document.activeElement as HTMLElement | null;
  if (e.shiftKey && (at === first || !root.contains(at))) {
    e.preventDefault();
    last.focus();
  } else if (!e.shiftKey && (at === last || !root.contains(at))) {
    e.preventDefault();
    first.focus();
  }
}

/** dialogKeys is a modal dialog's keydown: Tab stays inside root, and Esc
 * closes it without reaching the page (where it would stop the turn). */
export function dialogKeys(e: KeyboardEvent, root: HTMLElement | null, close: () => void) {
  trapTab(e, root);
  if (e.key === "Escape") {
    e.preventDefault();
    e.stopPropagation();
    close();
  }
}

/** modalOpen tells whether a modal dialog is showing. */
export function modalOpen(): boolean {
  return document.querySelector('[role=dialog][aria-modal="true"]') !== null;
}

/** focusComposer gives the focus back to where the user types. */
export function focusComposer() {
  document.querySelector<HTMLTextAreaElement>("[data-testid=composer]")?.focus();
}
