// Types of icons.js: tab icons as inline SVG (24×24, stroked with currentColor).
/** The icon for an SF-Symbol-like name (an SVG), or a span with the title's first letter when the name is unknown. */
export function tabdIcon(name: string, title: string): SVGSVGElement | HTMLSpanElement;
/** The icon a name resolves to (`house.fill` → `house`), or null for none. */
export function iconKey(name: string): string | null;
