// Types of colors.js: readable shades of a tab's colour (WCAG 2 contrast).
/** A colour as [r, g, b], each 0–255. */
export type RGB = [number, number, number];
/** [r, g, b] of `#RRGGBB` (grey for anything else). */
export function rgbOf(hex: string): RGB;
/** WCAG's relative luminance. */
export function luminance(rgb: RGB): number;
/** WCAG's contrast ratio of two colours (1 to 21). */
export function contrast(a: RGB, b: RGB): number;
/** `a` moved toward `b` by t (0…1). */
export function mix(a: RGB, b: RGB, t: number): RGB;
/** A shade of `color` that reads on `under` (4.5:1 with a margin). */
export function inkFor(color: RGB, under: RGB): RGB;
/** A shade of `color` that white text reads on (a button's fill). */
export function fillFor(color: RGB): RGB;
/** `rgb(…)`, or `rgba(…)` with an alpha. */
export function css(rgb: RGB, alpha?: number): string;
