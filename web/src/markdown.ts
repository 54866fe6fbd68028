// Model output to HTML: markdown-it with raw HTML off, highlight.js for
// fenced code, then DOMPurify over the result. The model's text is never
// trusted: markdown-it escapes its HTML, DOMPurify removes whatever a
// rendering bug might let through, remote images become plain links (a
// Markdown image can carry data to another host), and the page's CSP
// refuses inline script and foreign requests anyway.
import MarkdownIt from "markdown-it";
import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import go from "highlight.js/lib/languages/go";
import javascript from "highlight.js/lib/languages/javascript";
import typescript from "highlight.js/lib/languages/typescript";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import diff from "highlight.js/lib/languages/diff";
import yaml from "highlight.js/lib/languages/yaml";
import sql from "highlight.js/lib/languages/sql";
import xml from "highlight.js/lib/languages/xml";
import css from "highlight.js/lib/languages/css";
import shell from "highlight.js/lib/languages/shell";

for (const [name, lang] of Object.entries({ bash, go, javascript, typescript, json, python, diff, yaml, sql, xml, css, shell })) {
  hljs.registerLanguage(name, lang);
}
hljs.registerAliases(["sh", "zsh"], { languageName: "bash" });
hljs.registerAliases(["js"], { languageName: "javascript" });
hljs.registerAliases(["ts", "tsx"], { languageName: "typescript" });
hljs.registerAliases(["html"], { languageName: "xml" });
hljs.registerAliases(["golang"], { languageName: "go" });

function highlight(code: string, lang: string): string {
  if (lang && hljs.getLanguage(lang)) {
    try {
      return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
    } catch {
      /* fall back to plain */
    }
  }
  return ""; // markdown-it escapes it
}

const byExtension: Record<string, string> = {
  go: "go", ts: "typescript", tsx: "typescript", mts: "typescript", js: "javascript", mjs: "javascript", cjs: "javascript", jsx: "javascript",
  json: "json", py: "python", yaml: "yaml", yml: "yaml", sql: "sql", html: "xml", htm: "xml", xml: "xml", svg: "xml",
  css: "css", sh: "bash", bash: "bash", zsh: "bash", diff: "diff", patch: "diff",
};

/** languageOf names the highlighter's language for a file name, "" when it has none. */
export function languageOf(name: string): string {
  const ext = /\.([A-Za-z0-9]+)$/.exec(name)?.[1]?.toLowerCase() ?? "";
  return byExtension[ext] ?? "";
}

/** Files larger than this are shown as plain text: highlighting them would hold the page. */
const MAX_HIGHLIGHT = 256 << 10;

/** highlightCode returns code as safe HTML: highlighted in lang when it
 * has one (highlight.js escapes what it does not mark up), else escaped. */
export function highlightCode(code: string, lang: string): string {
  if (lang && code.length <= MAX_HIGHLIGHT) {
    const html = highlight(code, lang);
    if (html) return html;
  }
  return md.utils.escapeHtml(code);
}

const md = new MarkdownIt({ html: false, linkify: true, breaks: false, highlight });

const sameOrigin = (url: string) => {
  try {
    return new URL(url, location.href).origin === location.origin;
  } catch {
    return false;
  }
};

DOMPurify.addHook("afterSanitizeAttributes", (node: Element) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") ?? "";
    if (!/^(https?:|mailto:|#|\/)/i.test(href)) node.removeAttribute("href");
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
  if (node.tagName === "IMG") {
    const src = node.getAttribute("src") ?? "";
    if (!src.startsWith("data:image/") && !sameOrigin(src)) {
      // Not loaded: shown as the address it names, for the user to judge.
      const span = node.ownerDocument.createElement("span");
      span.className = "blocked-image";
      span.textContent = `[image not loaded: ${node.getAttribute("alt") || "image"} — ${src}]`;
      node.replaceWith(span);
    }
  }
});

const purifyOptions = {
  ALLOWED_TAGS: [
    "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "img", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table", "tbody",
    "td", "th", "thead", "tr", "ul",
  ],
  ALLOWED_ATTR: ["href", "src", "alt", "title", "class", "start", "align"],
  ALLOW_DATA_ATTR: false,
};

/** render turns model Markdown into sanitized HTML. */
export function render(text: string): string {
  return DOMPurify.sanitize(md.render(text), purifyOptions) as unknown as string;
}

/** renderUser is render for what the user typed (line breaks kept). */
export function renderUser(text: string): string {
  // What a user types keeps its line breaks, as it did as plain text (the
  // same parser with one option switched: a second one costs its start-up
  // when the page opens). No newline after the last block: the message's
  // text is what was typed.
  md.set({ breaks: true });
  try {
    return DOMPurify.sanitize(md.render(text).trimEnd(), purifyOptions) as unknown as string;
  } finally {
    md.set({ breaks: false });
  }
}
