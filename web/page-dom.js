// What the page's modules share for drawing (the page only: not part of the package).

/** A new element: `tag` with class `cls` and text `text` (either may be null). */
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

/** A control of a read-only page: still focusable and read out, marked as not usable
 * (aria-disabled, not `disabled`), with the why as its description. */
export function markReadOnly(control, ro) {
  if (ro) {
    control.setAttribute("aria-disabled", "true");
    control.setAttribute("aria-describedby", "view-only-why");
  } else {
    control.removeAttribute("aria-disabled");
    control.removeAttribute("aria-describedby");
  }
}

/** An error (a TabdError, or an error frame) in plain words where there are some, else as
 * tabd says it. */
export function errorText(f) {
  if (f.code === "forbidden") return "Not done: this link lets you watch this tab bar, not change it.";
  return `${f.code}: ${f.message}`;
}
