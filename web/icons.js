// Tab icons: inline SVGs (24×24, stroked with currentColor) for common SF-Symbol names, as
// an ES module (imported by tabd-tab-bar.js). `tabdIcon(name, title)` returns an element:
// the matching SVG, or the title's first letter when the name is unknown. SF-Symbol
// variants such as `house.fill`, `person.crop.circle` or `bell.badge` fall back to their
// base name (`iconKey(name)` says which, or null).
const SVG_NS = "http://www.w3.org/2000/svg";

// Each icon is a list of [element, attributes] drawn on a 24×24 grid.
const ICONS = {
  house: [
    ["path", { d: "M3 10.5 12 3l9 7.5" }],
    ["path", { d: "M5 9v11a1 1 0 0 0 1 1h4v-6h4v6h4a1 1 0 0 0 1-1V9" }],
  ],
  heart: [
    ["path", { d: "M20.8 4.6a5.5 5.5 0 0 0-7.8 0L12 5.7l-1-1.1a5.5 5.5 0 0 0-7.8 7.8l1 1.1L12 21.2l7.8-7.8 1-1.1a5.5 5.5 0 0 0 0-7.7z" }],
  ],
  person: [
    ["circle", { cx: "12", cy: "7.5", r: "4" }],
    ["path", { d: "M4 21v-1.5A5.5 5.5 0 0 1 9.5 14h5a5.5 5.5 0 0 1 5.5 5.5V21" }],
  ],
  message: [
    ["path", { d: "M21 11.5a8.4 8.4 0 0 1-.9 3.8 8.5 8.5 0 0 1-7.6 4.7 8.4 8.4 0 0 1-3.8-.9L3 21l1.9-5.7a8.4 8.4 0 0 1-.9-3.8 8.5 8.5 0 0 1 4.7-7.6 8.4 8.4 0 0 1 3.8-.9h.5a8.5 8.5 0 0 1 8 8z" }],
  ],
  envelope: [
    ["rect", { x: "2.5", y: "4.5", width: "19", height: "15", rx: "2" }],
    ["path", { d: "m3 6 9 7 9-7" }],
  ],
  gear: [
    ["circle", { cx: "12", cy: "12", r: "3" }],
    ["path", { d: "M19.4 15a1.7 1.7 0 0 0 .3 1.8l.1.1a2 2 0 1 1-2.8 2.8l-.1-.1a1.7 1.7 0 0 0-1.8-.3 1.7 1.7 0 0 0-1 1.5V21a2 2 0 0 1-4 0v-.1a1.7 1.7 0 0 0-1.1-1.5 1.7 1.7 0 0 0-1.8.3l-.1.1a2 2 0 1 1-2.8-2.8l.1-.1a1.7 1.7 0 0 0 .3-1.8 1.7 1.7 0 0 0-1.5-1H3a2 2 0 0 1 0-4h.1a1.7 1.7 0 0 0 1.5-1.1 1.7 1.7 0 0 0-.3-1.8l-.1-.1a2 2 0 1 1 2.8-2.8l.1.1a1.7 1.7 0 0 0 1.8.3H9a1.7 1.7 0 0 0 1-1.5V3a2 2 0 0 1 4 0v.1a1.7 1.7 0 0 0 1 1.5 1.7 1.7 0 0 0 1.8-.3l.1-.1a2 2 0 1 1 2.8 2.8l-.1.1a1.7 1.7 0 0 0-.3 1.8V9a1.7 1.7 0 0 0 1.5 1H21a2 2 0 0 1 0 4h-.1a1.7 1.7 0 0 0-1.5 1z" }],
  ],
  magnifyingglass: [
    ["circle", { cx: "10.5", cy: "10.5", r: "7" }],
    ["path", { d: "m21 21-5.5-5.5" }],
  ],
  star: [
    ["path", { d: "m12 2.5 2.9 6 6.6.9-4.8 4.6 1.2 6.5L12 17.4l-5.9 3.1 1.2-6.5-4.8-4.6 6.6-.9z" }],
  ],
  bell: [
    ["path", { d: "M18 8.5a6 6 0 0 0-12 0c0 7-3 8.5-3 8.5h18s-3-1.5-3-8.5" }],
    ["path", { d: "M13.7 21a2 2 0 0 1-3.4 0" }],
  ],
  bookmark: [
    ["path", { d: "M18 21l-6-4.5L6 21V5a2 2 0 0 1 2-2h8a2 2 0 0 1 2 2z" }],
  ],
  calendar: [
    ["rect", { x: "3", y: "4.5", width: "18", height: "16.5", rx: "2" }],
    ["path", { d: "M3 9.5h18M8 2.5v4M16 2.5v4" }],
  ],
  folder: [
    ["path", { d: "M3 6.5a2 2 0 0 1 2-2h4l2 2.5h8a2 2 0 0 1 2 2V18a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2z" }],
  ],
  trash: [
    ["path", { d: "M3.5 6h17M9 6V4a1 1 0 0 1 1-1h4a1 1 0 0 1 1 1v2" }],
    ["path", { d: "M5.5 6 6.5 20a1.5 1.5 0 0 0 1.5 1.5h8a1.5 1.5 0 0 0 1.5-1.5L18.5 6M10 10.5v6M14 10.5v6" }],
  ],
  globe: [
    ["circle", { cx: "12", cy: "12", r: "9" }],
    ["path", { d: "M3 12h18M12 3a14 14 0 0 1 0 18M12 3a14 14 0 0 0 0 18" }],
  ],
  clock: [
    ["circle", { cx: "12", cy: "12", r: "9" }],
    ["path", { d: "M12 7v5l3.5 2" }],
  ],
  cart: [
    ["circle", { cx: "9", cy: "20", r: "1.3" }],
    ["circle", { cx: "18", cy: "20", r: "1.3" }],
    ["path", { d: "M2 3h3l2.6 12.2a1.5 1.5 0 0 0 1.5 1.3h9a1.5 1.5 0 0 0 1.5-1.2L21 7H6" }],
  ],
  camera: [
    ["path", { d: "M3 8.5a2 2 0 0 1 2-2h2.5L9 4h6l1.5 2.5H19a2 2 0 0 1 2 2V18a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2z" }],
    ["circle", { cx: "12", cy: "13", r: "3.5" }],
  ],
  photo: [
    ["rect", { x: "3", y: "4", width: "18", height: "16", rx: "2" }],
    ["circle", { cx: "8.5", cy: "9.5", r: "1.5" }],
    ["path", { d: "m21 16-5-5L5 20" }],
  ],
  "music.note": [
    ["path", { d: "M9 18V5l11-2v13" }],
    ["circle", { cx: "6", cy: "18", r: "3" }],
    ["circle", { cx: "17", cy: "16", r: "3" }],
  ],
  map: [
    ["path", { d: "M9 4 3 6.5v13.5l6-2.5 6 2.5 6-2.5V4l-6 2.5z" }],
    ["path", { d: "M9 4v13.5M15 6.5V20" }],
  ],
  paperplane: [
    ["path", { d: "M22 2 11 13" }],
    ["path", { d: "M22 2 15 22l-4-9-9-4z" }],
  ],
  bag: [
    ["path", { d: "M5 7.5h14l-1 13H6z" }],
    ["path", { d: "M9 7.5V6a3 3 0 0 1 6 0v1.5" }],
  ],
  lock: [
    ["rect", { x: "4.5", y: "10.5", width: "15", height: "10.5", rx: "2" }],
    ["path", { d: "M8 10.5V7a4 4 0 0 1 8 0v3.5" }],
  ],
  flag: [
    ["path", { d: "M5 21V4M5 4.5s1.5-1.5 5-1.5 5 2 8 2 2-.5 2-.5v10s-.5.5-2 .5-4.5-2-8-2-5 1.5-5 1.5" }],
  ],
  cloud: [
    ["path", { d: "M7 19a4.5 4.5 0 0 1-.6-9A6 6 0 0 1 18 9.5a4.8 4.8 0 0 1-.5 9.5z" }],
  ],
  bolt: [
    ["path", { d: "M13 2 4 14h7l-1 8 9-12h-7z" }],
  ],
  book: [
    ["path", { d: "M4 19.5A2.5 2.5 0 0 1 6.5 17H20V3H6.5A2.5 2.5 0 0 0 4 5.5z" }],
    ["path", { d: "M4 19.5A2.5 2.5 0 0 0 6.5 22H20v-5" }],
  ],
  "list.bullet": [
    ["path", { d: "M9 6h12M9 12h12M9 18h12" }],
    ["circle", { cx: "4", cy: "6", r: "1" }],
    ["circle", { cx: "4", cy: "12", r: "1" }],
    ["circle", { cx: "4", cy: "18", r: "1" }],
  ],
  "square.grid.2x2": [
    ["rect", { x: "3.5", y: "3.5", width: "7", height: "7", rx: "1.5" }],
    ["rect", { x: "13.5", y: "3.5", width: "7", height: "7", rx: "1.5" }],
    ["rect", { x: "3.5", y: "13.5", width: "7", height: "7", rx: "1.5" }],
    ["rect", { x: "13.5", y: "13.5", width: "7", height: "7", rx: "1.5" }],
  ],
  play: [
    ["path", { d: "M7 4.5v15l12-7.5z" }],
  ],
  "chart.bar": [
    ["path", { d: "M4 20h16M7 16v-5M12 16V6M17 16v-8" }],
  ],
  info: [
    ["circle", { cx: "12", cy: "12", r: "9" }],
    ["path", { d: "M12 11v6M12 7.5v.01" }],
  ],
  plus: [
    ["path", { d: "M12 5v14M5 12h14" }],
  ],
};

// Other spellings of the same picture (SF-Symbol names first, then common web names).
const ALIASES = {
  home: "house", "house.circle": "house",
  mail: "envelope", "envelope.open": "envelope", "tray": "envelope",
  "message.circle": "message", bubble: "message", "bubble.left": "message", "bubble.right": "message",
  "bubble.left.and.bubble.right": "message", chat: "message",
  gearshape: "gear", "gearshape.2": "gear", settings: "gear", cog: "gear",
  search: "magnifyingglass", "magnifyingglass.circle": "magnifyingglass",
  "person.crop": "person", "person.2": "person", "person.3": "person", user: "person", profile: "person",
  "star.circle": "star", favorite: "star",
  "bell.badge": "bell", notification: "bell",
  "bookmark.circle": "bookmark",
  "heart.circle": "heart",
  "calendar.badge": "calendar",
  "trash.circle": "trash",
  "network": "globe",
  "clock.arrow": "clock", timer: "clock",
  "cart.badge": "cart",
  "camera.circle": "camera",
  "photo.on.rectangle": "photo", "photo.stack": "photo",
  music: "music.note", "music.note.list": "music.note",
  "map.circle": "map",
  "paperplane.circle": "paperplane", send: "paperplane",
  "bag.circle": "bag",
  "lock.circle": "lock",
  "bolt.circle": "bolt",
  "book.closed": "book", books: "book",
  list: "list.bullet",
  "square.grid.2x2": "square.grid.2x2", grid: "square.grid.2x2",
  "play.circle": "play",
  "chart.bar.xaxis": "chart.bar", chart: "chart.bar",
  "info.circle": "info",
  "plus.circle": "plus",
};

// house.fill -> house; person.crop.circle.fill -> person.crop.circle -> person.crop -> person.
function resolve(name) {
  let n = String(name || "").toLowerCase();
  while (n) {
    if (ICONS[n]) return n;
    if (ALIASES[n]) return ALIASES[n];
    const dot = n.lastIndexOf(".");
    if (dot < 0) break;
    n = n.slice(0, dot);
  }
  return null;
}

function svgFor(key) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "24");
  svg.setAttribute("height", "24");
  svg.setAttribute("fill", "none");
  svg.setAttribute("stroke", "currentColor");
  svg.setAttribute("stroke-width", "1.8");
  svg.setAttribute("stroke-linecap", "round");
  svg.setAttribute("stroke-linejoin", "round");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.classList.add("icon");
  for (const [tag, attrs] of ICONS[key]) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    svg.appendChild(el);
  }
  return svg;
}

function letterFor(title) {
  const span = document.createElement("span");
  span.className = "icon icon-letter";
  span.setAttribute("aria-hidden", "true");
  const first = Array.from(String(title || "?").trim())[0] || "?";
  span.textContent = first.toUpperCase();
  return span;
}

export function tabdIcon(name, title) {
  const key = resolve(name);
  return key ? svgFor(key) : letterFor(title);
}

export const iconKey = resolve;
