// The transcript's follow rule: it follows new content while the reader is
// at the bottom, and whether they are is judged from what the reader does
// (wheel, touch, keys, the scrollbar), never from scroll events alone.
// Content that grows fires scroll events too, and one read between the
// growth and the catch-up looks like a reader 70 px up: judging by those
// let go of the bottom for good in the middle of a turn.
import { useEffect, useRef, useState } from "preact/hooks";
import type { RefObject } from "preact";

/** How close to the end counts as the bottom, for a reader scrolling down. */
const NEAR = 48;
/** A wheel turn or key press scrolls (smoothly, in steps) for about this long. */
const INTENT_MS = 700;
const upKeys = new Set(["ArrowUp", "PageUp", "Home"]);
const scrollKeys = new Set(["ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End", " "]);

export interface Follow {
  following: boolean;
  /** toBottom follows again and shows the end: "Jump to latest", a message sent. */
  toBottom: () => void;
}

/** useFollow keeps scroller at the end of inner while the reader follows. */
export function useFollow(scroller: RefObject<HTMLElement | null>, inner: RefObject<HTMLElement | null>, anchor: RefObject<{ height: number; top: number } | null>, key: unknown): Follow {
  const [following, setFollowing] = useState(true);
  const ref = useRef(true);
  const set = (v: boolean) => {
    if (ref.current === v) return;
    ref.current = v;
    setFollowing(v);
  };
  const toBottom = () => {
    set(true);
    const el = scroller.current;
    if (el) el.scrollTop = el.scrollHeight;
  };
  useEffect(() => {
    const el = scroller.current!, content = inner.current!;
    let intentUntil = 0, dragging = false, lastTop = el.scrollTop;
    const intent = () => (intentUntil = performance.now() + INTENT_MS);
    const onWheel = (e: WheelEvent) => {
      intent();
      // Up is a decision even before anything moves (the scroll event
      // comes a frame later, after growth may have pulled the view down).
      if (e.deltaY < 0 && el.scrollHeight > el.clientHeight) set(false);
    };
    const onKey = (e: KeyboardEvent) => {
      if (!scrollKeys.has(e.key) || (e.target as HTMLElement).tagName === "TEXTAREA" || (e.target as HTMLElement).tagName === "INPUT") return;
      intent();
      if ((upKeys.has(e.key) || (e.key === " " && e.shiftKey)) && el.scrollHeight > el.clientHeight) set(false);
    };
    // The scrollbar is the scroller itself under the pointer.
    const onDown = (e: PointerEvent) => {
      if (e.target === el) dragging = true;
    };
    const onUp = () => (dragging = false);
    const onScroll = () => {
      const top = el.scrollTop;
      if (dragging || performance.now() < intentUntil) {
        if (top < lastTop - 1) set(false);
        else if (el.scrollHeight - top - el.clientHeight < NEAR) set(true);
      }
      lastTop = top;
    };
    const onResize = () => {
      if (anchor.current) {
        // An older page went in front: keep what the reader looked at.
        el.scrollTop = anchor.current.top + (el.scrollHeight - anchor.current.height);
        anchor.current = null;
      } else if (ref.current) el.scrollTop = el.scrollHeight;
      lastTop = el.scrollTop;
    };
    const ro = new ResizeObserver(onResize);
    ro.observe(content);
    // The scroller shrinks too (a taller composer, a rotated phone).
    ro.observe(el);
    el.addEventListener("wheel", onWheel, { passive: true });
    el.addEventListener("touchmove", intent, { passive: true });
    el.addEventListener("touchstart", intent, { passive: true });
    el.addEventListener("keydown", onKey);
    el.addEventListener("pointerdown", onDown);
    window.addEventListener("pointerup", onUp);
    el.addEventListener("scroll", onScroll, { passive: true });
    return () => {
      ro.disconnect();
      el.removeEventListener("wheel", onWheel);
      el.removeEventListener("touchmove", intent);
      el.removeEventListener("touchstart", intent);
      el.removeEventListener("keydown", onKey);
      el.removeEventListener("pointerdown", onDown);
      window.removeEventListener("pointerup", onUp);
      el.removeEventListener("scroll", onScroll);
    };
  }, [key]);
  return { following, toBottom };
}
