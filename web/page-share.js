// The page's "Copy link" button: copies the room's link. Where the clipboard is out of
// reach (a page served over plain http from another host than localhost, a refused
// permission), it shows the link selected in a field to copy by hand.
export class SharePanel {
  #els;
  #link;
  #toast;

  /** `els`: {button, panel, field, hint, close}; `link()`: what to share; `toast(text)`. */
  constructor(els, link, toast) {
    this.#els = els;
    this.#link = link;
    this.#toast = toast;
    els.button.addEventListener("click", () => this.#share());
    els.close.addEventListener("click", () => this.#close(true));
    els.field.addEventListener("focus", () => els.field.select());
    els.panel.addEventListener("keydown", (ev) => {
      if (ev.key !== "Escape") return;
      ev.preventDefault();
      this.#close(true);
    });
    document.addEventListener("click", (ev) => {
      if (!els.panel.contains(ev.target) && !els.button.contains(ev.target)) this.#close(false);
    });
  }

  async #share() {
    const link = this.#link();
    if (navigator.clipboard && typeof navigator.clipboard.writeText === "function") {
      try {
        await navigator.clipboard.writeText(link);
        this.#close(false);
        this.#toast("Link copied");
        return;
      } catch (e) {
        // refused: the field below
      }
    }
    this.#open(link);
  }

  #open(link) {
    const e = this.#els;
    e.field.value = link;
    e.panel.hidden = false;
    e.field.focus();
    e.field.select();
    // The old way still copies where the clipboard API is missing (plain http).
    let copied = false;
    try { copied = document.execCommand("copy"); } catch (err) { copied = false; }
    e.hint.textContent = copied ? "Link copied" : "Press Ctrl+C (⌘C on a Mac) to copy it";
    if (copied) this.#toast("Link copied");
  }

  #close(refocus) {
    const e = this.#els;
    if (e.panel.hidden) return;
    e.panel.hidden = true;
    if (refocus) e.button.focus();
  }
}
