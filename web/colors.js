// Colour arithmetic for readable tab colours (WCAG 2 contrast), shared by the tab bar
// element and the page: a tab's colour is the user's (any #RRGGBB), so text drawn in it,
// or on it, is a shade of it that reads.

/** [r, g, b] of `#RRGGBB` (grey for anything else). */
export function rgbOf(hex) {
  const m = /^#?([0-9a-f]{6})$/i.exec(String(hex || ""));
  const n = m ? parseInt(m[1], 16) : 0x8e8e93;
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/** WCAG's relative luminance. */
export function luminance([r, g, b]) {
  const lin = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

/** WCAG's contrast ratio of two colours (1 to 21). */
export function contrast(a, b) {
  const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}

/** `a` moved toward `b` by t (0…1). */
export const mix = (a, b, t) => a.map((v, i) => Math.round(v + (b[i] - v) * t));

/** A shade of `color` that reads on `under` (4.5:1 with a margin): darker on a light
 * background, lighter on a dark one. */
export function inkFor(color, under) {
  const toward = luminance(under) > 0.18 ? [0, 0, 0] : [255, 255, 255];
  for (let t = 0; t <= 1; t += 0.05) {
    const c = mix(color, toward, t);
    if (contrast(c, under) >= 4.6) return c;
  }
  return toward;
}

/** A shade of `color` that white text reads on (a button's fill). */
export function fillFor(color) {
  return inkFor(color, [255, 255, 255]);
}

/** `rgb(…)`, or `rgba(…)` with an alpha. */
export const css = ([r, g, b], a) => (a === undefined ? `rgb(${r}, ${g}, ${b})` : `rgba(${r}, ${g}, ${b}, ${a})`);
